package mlflow

import "testing"

// TestLocalDir: the artifact locations honoured are absolute, clean local
// directories (a path or a file:// URI without a host); everything else is
// refused, so no client-chosen location climbs or names another machine.
func TestLocalDir(t *testing.T) {
	for loc, want := range map[string]string{
		"/data/mlruns":            "/data/mlruns",
		"/data/mlruns/":           "/data/mlruns",
		"file:///data/mlruns/1":   "/data/mlruns/1",
		"file://localhost/data/x": "/data/x",
		"file:///data/a%20b":      "/data/a b",
		"/":                       "/",
		"relative":                "",
		"./x":                     "",
		"/a/../b":                 "",
		"/a/./b":                  "",
		"file:///a/../../etc":     "",
		"file://otherhost/x":      "",
		"file:relative":           "",
		"file:///x?y=1":           "",
		"s3://bucket/p":           "",
		"mlflow-artifacts:/1":     "",
		"hdfs:/x":                 "",
		"/a\\b":                   "",
		"/a\x00b":                 "",
		"":                        "",
		"file:///data/%2e%2e/etc": "",
	} {
		got, ok := localDir(loc)
		if want == "" && ok {
			t.Errorf("localDir(%q) = %q, want refused", loc, got)
		}
		if want != "" && (!ok || got != want) {
			t.Errorf("localDir(%q) = %q %v, want %q", loc, got, ok, want)
		}
	}
}

// TestUnderRoot: the server reads only inside its default artifact root.
func TestUnderRoot(t *testing.T) {
	root := t.TempDir()
	s := New(t.Context(), nil, Config{DefaultArtifactRoot: "file://" + root}, nil)
	for dir, want := range map[string]string{
		root:             "",
		root + "/1":      "1",
		root + "/1/r/a":  "1/r/a",
		root + "x/1":     "-",
		"/etc":           "-",
		root + "/../etc": "-",
		"":               "-",
	} {
		got, ok := s.underRoot(dir)
		if want == "-" && ok {
			t.Errorf("underRoot(%q) = %q, want outside", dir, got)
		}
		if want != "-" && (!ok || got != want) {
			t.Errorf("underRoot(%q) = %q %v, want %q", dir, got, ok, want)
		}
	}
}
