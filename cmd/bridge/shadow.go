// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"

	"github.com/v2bridge/v2bridge/translate"
)

// checkShadow validates the --shadow-* settings; --shadow-prefix defaults
// to --serve-prefix, checked already.
func (c *config) checkShadow() error {
	switch {
	case math.IsNaN(c.shadowSampleRate) || c.shadowSampleRate < 0 || c.shadowSampleRate > 1:
		return usageErrorf("--shadow-sample-rate %v: want a share from 0 (off) to 1 (every request)", c.shadowSampleRate)
	case c.shadowQueue <= 0:
		return usageErrorf("--shadow-queue %d: want at least 1", c.shadowQueue)
	case c.shadowPrefix == "":
		c.shadowPrefix = c.servePrefix
		return nil
	}
	if _, verr := translate.CleanPath(c.shadowPrefix); verr != nil {
		return usageErrorf("--shadow-prefix %q: %s", c.shadowPrefix, verr.Cause)
	}
	return nil
}
