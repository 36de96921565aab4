package httpapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testbomb"
)

// compressAs compresses p as a client sends it with Content-Encoding:
// "gzip", "deflate" (zlib, what tritonclient sends) or "deflate-raw" (bare
// deflate data, which some clients send as deflate).
func compressAs(t testing.TB, enc string, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "deflate":
		w = zlib.NewWriter(&b)
	case "deflate-raw":
		w, _ = flate.NewWriter(&b, flate.DefaultCompression)
	default:
		t.Fatalf("no encoding %q", enc)
	}
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// decompressAs reads a response body of Content-Encoding enc as a client
// does: deflate is zlib.
func decompressAs(t testing.TB, enc string, p []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch enc {
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(p))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(p))
	default:
		t.Fatalf("Content-Encoding %q", enc)
	}
	if err != nil {
		t.Fatalf("%s response: %v", enc, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s response: %v", enc, err)
	}
	return b
}

// chunked hides a body's length, so the client sends it chunked and fasthttp
// hands the handler a stream (the path large and NDJSON bodies take).
type chunked struct{ io.Reader }

// post sends body to path with the headers hdr (name, value pairs), as it
// is when stream is false or chunked when it is, and returns the reply
// exactly as the server sent it: the client decompresses nothing.
func post(t testing.TB, url, ctype string, body []byte, stream bool, hdr ...string) v2Reply {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if stream {
		rd = chunked{rd}
	}
	req, err := http.NewRequest("POST", url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept-Encoding", "identity") // else Go's client asks for gzip and decodes it unseen
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return v2Reply{resp.StatusCode, resp.Header, b}
}

// rowsOf is n rows of the model's test vector (repeated as needed) as one
// FP32 tensor.
func rowsOf(t testing.TB, m *engine.Model, n int) engine.Tensor {
	t.Helper()
	in, _, _, _ := v2TestVector(t, m)
	x := in[m.Inputs()[0].Name]
	per := len(x.Data) / int(x.Shape[0])
	shape := append([]int64{int64(n)}, x.Shape[1:]...)
	y, err := engine.NewTensor(x.DType, shape)
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < n; r++ {
		copy(y.Data[r*per:], x.Data[(r%int(x.Shape[0]))*per:][:per])
	}
	return y
}

// predictRows is {"data": rows} for /predict.
func predictRows(t testing.TB, x engine.Tensor) []byte {
	n := int(x.Shape[0])
	rows := make([][]float64, n)
	per := x.Len() / n
	for r := range rows {
		for i := 0; i < per; i++ {
			rows[r] = append(rows[r], x.At(r*per+i))
		}
	}
	return v2Marshal(t, map[string]any{"data": rows})
}

// ndjsonRows is one {"id": i, "data": [row]} line per row.
func ndjsonRows(t testing.TB, x engine.Tensor) []byte {
	n := int(x.Shape[0])
	per := x.Len() / n
	var b bytes.Buffer
	for r := 0; r < n; r++ {
		row := make([]float64, per)
		for i := range row {
			row[i] = x.At(r*per + i)
		}
		b.Write(v2Marshal(t, map[string]any{"id": r, "data": [][]float64{row}}))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// A compressed request body reads as the same body uncompressed, on every
// route that takes a body (NDJSON and chunked bodies included), for gzip,
// deflate as tritonclient sends it (zlib) and bare deflate data; the
// binary extension's Inference-Header-Content-Length counts the
// uncompressed JSON.
func TestCompressedRequestBodies(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	cnn := v2Start(t, "digits_cnn.onnx", Config{})
	x := rowsOf(t, ts.m, 8)
	binReq, hl := v2BinaryBody(t, map[string]any{
		"inputs":  []any{map[string]any{"name": "input", "shape": x.Shape, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": len(x.Data)}}},
		"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}},
	}, x.Data)
	routes := []struct {
		name, url, ctype string
		body             []byte
		hdr              []string
	}{
		{"predict", ts.url + "/predict", "application/json", predictRows(t, x), nil},
		{"v2 json", ts.url + "/v2/models/digits_mlp/infer", "application/json", v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", x, false)}}), nil},
		{"v2 binary", ts.url + "/v2/models/digits_mlp/versions/1/infer", "application/octet-stream", binReq, []string{v2HeaderLength, hl}},
		{"batch json", ts.url + "/predict/batch", "application/json", v2Marshal(t, map[string]any{"requests": []any{map[string]any{"id": "a", "data": [][]float64{{}}}, json.RawMessage(predictRows(t, x))}}), nil},
		{"batch ndjson", ts.url + "/predict/batch", "application/x-ndjson", ndjsonRows(t, x), nil},
		{"image", cnn.url + "/predict/image?top_k=3", "image/png", digitPNG(t), nil},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			want := post(t, rt.url, rt.ctype, rt.body, false, rt.hdr...)
			if want.status != 200 {
				t.Fatalf("uncompressed: %d %s", want.status, want.body)
			}
			for _, enc := range []string{"gzip", "deflate", "deflate-raw"} {
				for _, stream := range []bool{false, true} {
					ce := strings.TrimSuffix(enc, "-raw")
					got := post(t, rt.url, rt.ctype, compressAs(t, enc, rt.body), stream, append([]string{"Content-Encoding", ce}, rt.hdr...)...)
					if got.status != 200 || !bytes.Equal(got.body, want.body) || got.header.Get(v2HeaderLength) != want.header.Get(v2HeaderLength) {
						t.Fatalf("%s (chunked %v): %d %s %q\nwant the uncompressed answer %s %q", enc, stream, got.status, got.header.Get(v2HeaderLength), got.body, want.header.Get(v2HeaderLength), want.body)
					}
				}
			}
		})
	}
}

// A response is compressed as Accept-Encoding asks (quality values
// honoured) once it is worth it: the same bytes once decompressed, with
// Inference-Header-Content-Length still counting the uncompressed JSON.
// Small bodies, errors and streamed NDJSON are sent as they are.
func TestCompressedResponses(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	x := rowsOf(t, ts.m, 64)
	v2JSON := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", x, false)}})
	v2Bin := v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", x, false)}, "parameters": map[string]any{"binary_data_output": true}})
	bodies := []struct {
		name, url, ctype string
		body             []byte
	}{
		{"predict", ts.url + "/predict", "application/json", predictRows(t, x)},
		{"v2 json", ts.url + "/v2/models/digits_mlp/infer", "application/json", v2JSON},
		{"v2 binary", ts.url + "/v2/models/digits_mlp/infer", "application/json", v2Bin},
		{"batch json", ts.url + "/predict/batch", "application/json", v2Marshal(t, map[string]any{"requests": []any{json.RawMessage(predictRows(t, x))}})},
	}
	accepts := []struct{ accept, want string }{
		{"gzip", "gzip"},
		{"deflate", "deflate"},
		{"gzip, deflate, br", "gzip"},
		{"deflate, gzip;q=0.5", "deflate"},
		{"GZIP;Q=0, deflate;q=0.1", "deflate"},
		{"*", "gzip"},
		{"br;q=1, *;q=0.3, gzip;q=0", "deflate"},
		{"gzip;q=0", ""},
		{"br", ""},
		{"identity", ""},
		{"gzip;q=zzz", ""},
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			plain := post(t, b.url, b.ctype, b.body, false)
			if plain.status != 200 || len(plain.body) < minCompressBytes || plain.header.Get("Content-Encoding") != "" {
				t.Fatalf("uncompressed: %d, %d bytes, Content-Encoding %q", plain.status, len(plain.body), plain.header.Get("Content-Encoding"))
			}
			for _, a := range accepts {
				r := post(t, b.url, b.ctype, b.body, false, "Accept-Encoding", a.accept)
				if ce := r.header.Get("Content-Encoding"); r.status != 200 || ce != a.want {
					t.Fatalf("Accept-Encoding %q: %d, Content-Encoding %q, want %q", a.accept, r.status, ce, a.want)
				}
				body := r.body
				if a.want != "" {
					if len(body) >= len(plain.body) || r.header.Get("Vary") != "Accept-Encoding" {
						t.Fatalf("Accept-Encoding %q: %d bytes compressed from %d, Vary %q", a.accept, len(body), len(plain.body), r.header.Get("Vary"))
					}
					body = decompressAs(t, a.want, body)
				}
				if !bytes.Equal(body, plain.body) || r.header.Get(v2HeaderLength) != plain.header.Get(v2HeaderLength) || r.header.Get("Content-Type") != plain.header.Get("Content-Type") {
					t.Fatalf("Accept-Encoding %q: %s %s %q\nwant %s %s %q", a.accept, r.header.Get("Content-Type"), r.header.Get(v2HeaderLength), body,
						plain.header.Get("Content-Type"), plain.header.Get(v2HeaderLength), plain.body)
				}
				if b.name == "v2 binary" {
					r.body = body
					if _, vals := v2Decode(t, r); len(vals["logits"]) != 64*10 {
						t.Fatalf("binary logits: %d values", len(vals["logits"]))
					}
				}
			}
		})
	}
	t.Run("small", func(t *testing.T) {
		r := post(t, ts.url+"/predict", "application/json", predictRows(t, rowsOf(t, ts.m, 1)), false, "Accept-Encoding", "gzip")
		if r.status != 200 || r.header.Get("Content-Encoding") != "" || len(r.body) >= minCompressBytes {
			t.Fatalf("one row: %d, %d bytes, Content-Encoding %q", r.status, len(r.body), r.header.Get("Content-Encoding"))
		}
	})
	t.Run("error", func(t *testing.T) {
		r := post(t, ts.url+"/v2/models/digits_mlp/infer", "application/json", []byte(`{"inputs": [{"name": "`+strings.Repeat("x", 2*minCompressBytes)+`"}]}`), false, "Accept-Encoding", "gzip")
		if r.header.Get("Content-Encoding") != "" || len(r.body) < minCompressBytes {
			t.Fatalf("a large error: %d bytes, Content-Encoding %q", len(r.body), r.header.Get("Content-Encoding"))
		}
		r.expectError(t, 400, CodeInvalidInput, "unknown input")
	})
	t.Run("ndjson", func(t *testing.T) {
		lines := ndjsonRows(t, x)
		for _, enc := range []string{"", "gzip"} {
			body, hdr := lines, []string{"Accept-Encoding", "gzip"}
			if enc != "" {
				body, hdr = compressAs(t, enc, lines), append(hdr, "Content-Encoding", enc)
			}
			r := post(t, ts.url+"/predict/batch", "application/x-ndjson", body, true, hdr...)
			if r.status != 200 || r.header.Get("Content-Encoding") != "" || bytes.Count(r.body, []byte("\n")) != 64 || bytes.Contains(r.body, []byte(`"error"`)) {
				t.Fatalf("NDJSON (request %q): %d, Content-Encoding %q: %s", enc, r.status, r.header.Get("Content-Encoding"), r.body)
			}
		}
	})
}

// A decompression bomb (10 GiB of zeros in about 10 MB of gzip or zlib) is
// refused with 413 (on /v2, Triton's 400) once --max-body-bytes of it is
// decompressed, on every
// route: it is never inflated whole (the process, client and server both,
// allocates a small multiple of the limit, not gigabytes), and the server
// goes on serving.
func TestDecompressionBombs(t *testing.T) {
	const max = 16 << 20 // over the bombs' compressed size, so the decoded size is what is refused
	ts := v2Start(t, "digits_mlp.onnx", Config{MaxBodyBytes: max})
	cnn := v2Start(t, "digits_cnn.onnx", Config{MaxBodyBytes: max})
	bombs := map[string][]byte{"gzip": testbomb.Gzip(10), "deflate": testbomb.Zlib(10)}
	routes := []struct{ name, url, ctype string }{
		{"predict", ts.url + "/predict", "application/json"},
		{"v2", ts.url + "/v2/models/digits_mlp/infer", "application/json"},
		{"batch", ts.url + "/predict/batch", "application/json"},
		{"image", cnn.url + "/predict/image", "image/png"},
	}
	for enc, bomb := range bombs {
		if len(bomb) >= max {
			t.Fatalf("the %s bomb is %d bytes, not under the limit", enc, len(bomb))
		}
		for _, rt := range routes {
			for _, stream := range []bool{false, true} {
				var r v2Reply
				if n := allocated(func() { r = post(t, rt.url, rt.ctype, bomb, stream, "Content-Encoding", enc) }); n > 256<<20 {
					t.Errorf("%s %s (chunked %v): %d MiB allocated for a %d MiB limit", enc, rt.name, stream, n>>20, max>>20)
				}
				if rt.name == "v2" {
					// Triton's status and sentence on /v2.
					r.expectError(t, 400, CodeTooLarge, "Decompressed data size exceeds the maximum allowed value of 16777216 bytes. Use --http-max-input-size to increase the limit.")
					continue
				}
				var e struct {
					Error APIError `json:"error"`
				}
				if r.status != 413 || json.Unmarshal(r.body, &e) != nil || e.Error.Code != CodeTooLarge || !strings.Contains(e.Error.Message, "--max-body-bytes") {
					t.Fatalf("%s %s (chunked %v): %d %s", enc, rt.name, stream, r.status, r.body)
				}
			}
		}
		// NDJSON streams: the answer is already 200 when the bound is
		// passed, so the stream ends with a 413 line in place of the
		// line the bomb was.
		r := post(t, ts.url+"/predict/batch", "application/x-ndjson", bomb, true, "Content-Encoding", enc)
		var line struct {
			ID    int `json:"id"`
			Error struct {
				Code   string `json:"code"`
				Status int    `json:"status"`
			} `json:"error"`
		}
		if r.status != 200 || bytes.Count(r.body, []byte("\n")) != 1 || json.Unmarshal(r.body, &line) != nil || line.Error.Status != 413 || line.Error.Code != CodeTooLarge {
			t.Fatalf("%s NDJSON: %d %s", enc, r.status, r.body)
		}
	}
	if r := post(t, ts.url+"/predict", "application/json", compressAs(t, "gzip", predictRows(t, rowsOf(t, ts.m, 2))), false, "Content-Encoding", "gzip"); r.status != 200 {
		t.Fatalf("after the bombs: %d %s", r.status, r.body)
	}
}

// A body that is not what its Content-Encoding says is a 400 in the route's
// error shape, saying how to send it; so is one that breaks off. NDJSON
// answers the lines before the break and ends with the error.
func TestCorruptCompressedBodies(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	good := predictRows(t, rowsOf(t, ts.m, 2))
	gz, zl := compressAs(t, "gzip", good), compressAs(t, "deflate", good)
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-5] ^= 0xff // the CRC-32 before the length
	badAdler := bytes.Clone(zl)
	badAdler[len(badAdler)-1] ^= 0xff
	cases := []struct {
		name, enc string
		body      []byte
		says      string
	}{
		{"plain JSON as gzip", "gzip", good, "gzip: invalid header"},
		{"empty gzip", "gzip", nil, "unexpected EOF"},
		{"truncated gzip", "gzip", gz[:len(gz)/2], "unexpected EOF"},
		{"gzip checksum", "gzip", badCRC, "checksum"},
		{"gzip then garbage", "gzip", append(bytes.Clone(gz), "trailing garbage"...), "invalid header"},
		{"zlib then garbage", "deflate", append(bytes.Clone(zl), "trailing garbage"...), "data after the end of the stream"},
		{"plain JSON as deflate", "deflate", good, "corrupt input"},
		{"empty deflate", "deflate", nil, "unexpected EOF"},
		{"truncated zlib", "deflate", zl[:len(zl)/2], "unexpected EOF"},
		{"zlib checksum", "deflate", badAdler, "checksum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				r := post(t, ts.url+"/predict", "application/json", c.body, stream, "Content-Encoding", c.enc)
				var e struct {
					Error APIError `json:"error"`
				}
				if r.status != 400 || json.Unmarshal(r.body, &e) != nil || e.Error.Code != CodeBadRequest ||
					!strings.Contains(e.Error.Message, c.says) || !strings.Contains(e.Error.Message, "send it uncompressed without Content-Encoding") {
					t.Fatalf("/predict (chunked %v): %d %s", stream, r.status, r.body)
				}
				r = post(t, ts.url+"/v2/models/digits_mlp/infer", "application/json", c.body, stream, "Content-Encoding", c.enc)
				r.expectError(t, 400, CodeBadRequest, "not valid "+c.enc)
			}
		})
	}
	t.Run("ndjson", func(t *testing.T) {
		lines := compressAs(t, "gzip", ndjsonRows(t, rowsOf(t, ts.m, 200)))
		r := post(t, ts.url+"/predict/batch", "application/x-ndjson", lines[:len(lines)/2], true, "Content-Encoding", "gzip")
		out := strings.Split(strings.TrimSuffix(string(r.body), "\n"), "\n")
		last := out[len(out)-1]
		if r.status != 200 || len(out) < 2 || strings.Contains(out[0], "error") || !strings.Contains(last, `"id":`+strconv.Itoa(len(out)-1)+`,"error":{"code":"bad_request"`) || !strings.Contains(last, "unexpected EOF") {
			t.Fatalf("a truncated NDJSON stream: %d, %d lines, last %s", r.status, len(out), last)
		}
	})
}

// A Content-Encoding fw does not read is a 415 naming the ones it does,
// before the body is read; identity, x-gzip and any case are read.
func TestContentEncodings(t *testing.T) {
	ts := v2Start(t, "digits_mlp.onnx", Config{})
	cnn := v2Start(t, "digits_cnn.onnx", Config{})
	good := predictRows(t, rowsOf(t, ts.m, 1))
	for _, ce := range []string{"br", "zstd", "compress", "gzip, deflate", "deflate, deflate", "gzip;q=1"} {
		for _, rt := range []struct{ url, ctype string }{
			{ts.url + "/predict", "application/json"},
			{ts.url + "/predict/batch", "application/json"},
			{ts.url + "/predict/batch", "application/x-ndjson"},
			{cnn.url + "/predict/image", "image/png"},
		} {
			r := post(t, rt.url, rt.ctype, good, false, "Content-Encoding", ce)
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
					Details struct {
						Accepted []string `json:"accepted_encodings"`
					} `json:"details"`
				} `json:"error"`
			}
			if r.status != 415 || json.Unmarshal(r.body, &e) != nil || e.Error.Code != CodeUnsupportedMedia ||
				!strings.Contains(e.Error.Message, "gzip") || fmt.Sprint(e.Error.Details.Accepted) != "[gzip deflate identity]" {
				t.Fatalf("Content-Encoding %q on %s (%s): %d %s", ce, rt.url, rt.ctype, r.status, r.body)
			}
		}
		r := post(t, ts.url+"/v2/models/digits_mlp/infer", "application/json", v2Marshal(t, map[string]any{"inputs": []any{v2JSONInput("input", rowsOf(t, ts.m, 1), false)}}), false, "Content-Encoding", ce)
		r.expectError(t, 415, CodeUnsupportedMedia, "gzip or deflate")
	}
	for _, c := range []struct{ ce, enc string }{{"identity", ""}, {"", ""}, {"GZIP", "gzip"}, {"x-gzip", "gzip"}, {" Deflate ", "deflate"}, {"identity, gzip", "gzip"}} {
		body := good
		if c.enc != "" {
			body = compressAs(t, c.enc, good)
		}
		if r := post(t, ts.url+"/predict", "application/json", body, false, "Content-Encoding", c.ce); r.status != 200 {
			t.Fatalf("Content-Encoding %q: %d %s", c.ce, r.status, r.body)
		}
	}
}

func TestPreferredEncoding(t *testing.T) {
	f := func(h, want string) {
		t.Helper()
		if got := preferredEncoding([]byte(h)); got != want {
			t.Errorf("Accept-Encoding %q: %q, want %q", h, got, want)
		}
	}
	f("", "")
	f("gzip", "gzip")
	f("x-gzip", "gzip")
	f("deflate", "deflate")
	f("gzip, deflate", "gzip")
	f("deflate, gzip", "gzip")
	f("deflate;q=1, gzip;q=0.9", "deflate")
	f("gzip ; q=0.5 , deflate ; q=0.5", "gzip")
	f("*", "gzip")
	f("*;q=0", "")
	f("gzip;q=0, *", "deflate")
	f("br, zstd", "")
	f("identity;q=1, *;q=0", "")
	f("gzip;q=2", "")
	f("gzip;q=-1", "")
	f(",,;;=,", "")
}

// FuzzAcceptEncoding: any Accept-Encoding header gives gzip, deflate or
// nothing, and only a coding the header names (or "*" stands for).
func FuzzAcceptEncoding(f *testing.F) {
	for _, h := range []string{"gzip", "deflate;q=0.5, gzip;q=0.1", "*;q=0", "br, *", "x-gzip;q=1.0", "gzip;q=1e9", ";q=", "GZIP;Q=0.001"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := preferredEncoding([]byte(h))
		low := strings.ToLower(h)
		switch got {
		case "":
		case "gzip", "deflate":
			if !strings.Contains(low, got) && !strings.Contains(low, "*") {
				t.Fatalf("%q for Accept-Encoding %q", got, h)
			}
		default:
			t.Fatalf("%q for Accept-Encoding %q", got, h)
		}
	})
}
