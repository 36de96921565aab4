// Package benchdoc rewrites one benchmark's section of docs/benchmarks.md,
// between <!-- bench:NAME:start --> and <!-- bench:NAME:end -->, leaving the
// rest of the file as it is.
package benchdoc

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// ReplaceSection writes body as the NAME section of the markdown file at
// path, appending the section when the file has none. The write is atomic
// (a temporary file renamed over the old one).
func ReplaceSection(path, name, body string) error {
	startM, endM := "<!-- bench:"+name+":start -->", "<!-- bench:"+name+":end -->"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	doc := string(old)
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	block := startM + "\n" + body + endM
	i, j := strings.Index(doc, startM), strings.Index(doc, endM)
	if i >= 0 && j > i {
		doc = doc[:i] + block + doc[j+len(endM):]
	} else {
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		doc += block + "\n"
	}
	tmp := path + ".tmp-" + name
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// Commit names the code a measurement ran on, for the section's text:
// "commit abc1234", with ", dirty" when the work tree had uncommitted
// changes to tracked files outside docs/, or "an unknown commit" outside a
// git checkout.
func Commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	s := "commit " + strings.TrimSpace(string(out))
	// docs/ is left out: the benchmarks' own output is not the code they ran.
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		s += ", dirty"
	}
	return s
}

// PercentileMs is the p-th percentile (0 < p <= 1, nearest rank) of ds in
// milliseconds, 0 for none: the p50 and p99 columns of the benchmarks.
func PercentileMs(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / 1e6
}
