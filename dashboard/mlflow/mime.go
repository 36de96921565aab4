package mlflow

import (
	"net/url"
	"path"
	"strings"
)

// textNames are the extensions (and extension-less file names) MLflow
// serves as text/plain (mlflow/utils/mime_type_utils.py).
var textNames = map[string]bool{
	"txt": true, "log": true, "err": true, "cfg": true, "conf": true, "cnf": true, "cf": true, "ini": true,
	"properties": true, "prop": true, "hocon": true, "toml": true, "yaml": true, "yml": true, "xml": true,
	"json": true, "js": true, "py": true, "py3": true, "csv": true, "tsv": true, "md": true, "rst": true,
	"ipynb": true, "MLmodel": true, "MLproject": true, "mlproject": true, // MLflow matches "mlproject"
}

// mimeTypes is a fixed table (not the host's mime.types, which differs
// between machines) of the types MLflow's server gives common artifacts.
var mimeTypes = map[string]string{
	"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "bmp": "image/bmp",
	"webp": "image/webp", "svg": "image/svg+xml", "tif": "image/tiff", "tiff": "image/tiff",
	"pdf": "application/pdf", "html": "text/html", "htm": "text/html", "zip": "application/zip",
	"gz": "application/gzip", "tar": "application/x-tar", "mp4": "video/mp4", "wav": "audio/x-wav",
	"mp3": "audio/mpeg",
}

// mimeType is the Content-Type of an artifact, by its name as MLflow
// chooses it: text/plain for text files, the extension's type, else
// application/octet-stream. The client's upload type is never used.
func mimeType(name string) string {
	base := path.Base(name)
	ext := strings.TrimPrefix(path.Ext(base), ".")
	if ext == "" {
		ext = base
	}
	if textNames[ext] {
		return "text/plain"
	}
	if t, ok := mimeTypes[strings.ToLower(ext)]; ok {
		return t
	}
	return "application/octet-stream"
}

// contentDisposition is an attachment header for a file name, as MLflow's
// server (werkzeug) writes it: the name bare when it is an HTTP token
// ("attachment; filename=dog+step+20.png"), else quoted with quotes,
// backslashes and control characters dropped and other non-ASCII bytes as
// '_', plus RFC 5987's filename*= for a non-ASCII name.
func contentDisposition(name string) string {
	var b strings.Builder
	ascii, token := true, name != ""
	for _, r := range name {
		switch {
		case r == '"' || r == '\\' || r < 0x20 || r == 0x7f:
			token = false
		case r > 0x7e:
			ascii, token = false, false
			b.WriteByte('_')
		default:
			if !tokenRune(r) {
				token = false
			}
			b.WriteRune(r)
		}
	}
	if token {
		return "attachment; filename=" + name
	}
	out := `attachment; filename="` + b.String() + `"`
	if !ascii {
		out += "; filename*=UTF-8''" + url.PathEscape(name)
	}
	return out
}

// tokenRune reports whether r may appear in an HTTP token (RFC 9110).
func tokenRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}
