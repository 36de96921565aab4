// Package benchdoc rewrites one benchmark's section of docs/benchmarks.md,
// between <!-- bench:NAME:start --> and <!-- bench:NAME:end -->, leaving the
// rest of the file as it is.
package benchdoc

import (
	"fmt"
	"os"
	"strings"
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
