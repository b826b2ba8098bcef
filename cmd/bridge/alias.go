// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
)

// aliasValue is a deprecated flag name: it holds what was given under the
// old name (command line, V2BRIDGE_* variable or --config-file), and
// resolveAliases hands it to the flag that replaced it. Help leaves it out.
type aliasValue struct {
	target *flag.Flag // the flag that replaced it
	val    string
	set    bool
	used   bool // resolveAliases applied it: warn once
}

func (a *aliasValue) Set(s string) error {
	a.val, a.set = s, true
	return nil
}

func (a *aliasValue) String() string {
	if a == nil {
		return ""
	}
	return a.val
}

// IsBoolFlag lets the old name of a bool flag stand alone, as the new one does.
func (a *aliasValue) IsBoolFlag() bool {
	if a == nil || a.target == nil {
		return false
	}
	b, ok := a.target.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// addAlias registers old as a deprecated name of fs's flag name.
func addAlias(fs *flag.FlagSet, old, name string) {
	target := fs.Lookup(name)
	if target == nil {
		panic("alias " + old + " of an undefined flag " + name)
	}
	fs.Var(&aliasValue{target: target}, old, "deprecated: use --"+name)
}

// isAlias reports whether f is a deprecated name.
func isAlias(f *flag.Flag) bool {
	_, ok := f.Value.(*aliasValue)
	return ok
}

// resolveAliases hands each deprecated name given to the flag that replaced
// it; set names the flags given from any source. Old and new names given
// with different values are a command-line mistake.
func resolveAliases(fs *flag.FlagSet, set map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		a, ok := f.Value.(*aliasValue)
		if !ok || !a.set || err != nil || a.target == nil {
			return
		}
		if !set[a.target.Name] {
			if serr := a.target.Value.Set(a.val); serr != nil {
				err = usageErrorf("--%s (deprecated name of --%s): %v", f.Name, a.target.Name, serr)
				return
			}
			set[a.target.Name], a.used = true, true
			return
		}
		before := a.target.Value.String()
		if serr := a.target.Value.Set(a.val); serr != nil || a.target.Value.String() != before {
			err = usageErrorf("--%s and --%s are one setting, given two values (%q, %q): give only --%s",
				f.Name, a.target.Name, a.val, before, a.target.Name)
			return
		}
		a.used = true
	})
	return err
}

// deprecationWarnings are one line for each deprecated name that was used.
func deprecationWarnings(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if a, ok := f.Value.(*aliasValue); ok && a.used {
			out = append(out, fmt.Sprintf("warning: --%s (%s) is deprecated: use --%s (%s)",
				f.Name, envName(f.Name), a.target.Name, envName(a.target.Name)))
		}
	})
	sort.Strings(out)
	return out
}

// printDeprecated writes deprecationWarnings to w.
func printDeprecated(w io.Writer, fs *flag.FlagSet) {
	for _, s := range deprecationWarnings(fs) {
		_, _ = fmt.Fprintln(w, progName+": "+s)
	}
}
