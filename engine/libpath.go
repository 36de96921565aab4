package engine

import (
	"os"
	"path/filepath"
)

// findLibrary looks for a shared library in the order fw uses everywhere
// (Go and the Makefile agree on it): the explicit override, then rel under
// the directory above the executable (an installed layout: bin/fw,
// third_party/..., build/lib/...), then rel under the working directory and
// its parents (tests run inside package directories). It returns "" when
// nothing is found.
func findLibrary(override string, rels ...string) string {
	if override != "" {
		return override
	}
	var roots []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(exe)), filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for d, i := wd, 0; i < 5; i++ {
			roots = append(roots, d)
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	for _, root := range roots {
		for _, rel := range rels {
			p := filepath.Join(root, rel)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	return ""
}
