// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math"

	"github.com/v2bridge/v2bridge/translate"
)

// checkShadow validates the --shadow-* settings.
func (c *config) checkShadow() error {
	switch {
	case math.IsNaN(c.shadowSampleRate) || c.shadowSampleRate < 0 || c.shadowSampleRate > 1:
		return fmt.Errorf("--shadow-sample-rate %v: want a share from 0 (off) to 1 (every request)", c.shadowSampleRate)
	case c.shadowQueue <= 0:
		return fmt.Errorf("--shadow-queue %d: want at least 1", c.shadowQueue)
	}
	if _, verr := translate.CleanPath(c.shadowPrefix); verr != nil {
		return fmt.Errorf("--shadow-prefix %q: %s", c.shadowPrefix, verr.Cause)
	}
	return nil
}
