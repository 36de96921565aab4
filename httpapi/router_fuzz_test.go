package httpapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"io"
	"math"
	"mime/multipart"
	"strconv"
	"strings"
	"testing"

	"github.com/fw-serve/fw/batcher"
)

// The fuzz targets below go through the real router (Server.Handler on a
// fasthttp.RequestCtx, as fasthttp calls it) on real reference models, so a
// missed check anywhere between the router and the engine shows up, not
// only in the decoders: no route may panic (checkAnswer fails on a recovered
// panic), and every answer is a 200 or a documented error in its shape.

// fuzzable bounds what one fuzz input may be, so a run spends its time on
// shapes of input rather than on megabytes of it.
func fuzzable(body []byte, strs ...string) bool {
	if len(body) > 256<<10 {
		return false
	}
	for _, s := range strs {
		if len(s) > 512 {
			return false
		}
	}
	return true
}

// FuzzRouterPredict: POST /predict?query on the digits MLP (64 inputs).
func FuzzRouterPredict(f *testing.F) {
	es := newEdgeServer(f, "digits_mlp.onnx", Config{}, batcher.Config{MaxDelay: 0}, nil)
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	for _, s := range []string{
		`{"data":[[` + row + `]]}`,
		`{"data":[[` + row + `],[` + row + `]],"top_k":3}`,
		`{"inputs":{"input":[[` + row + `]]}}`,
		`{"data":[` + row + `]}`,
		`{"data":[[1e999]]}`, `{"data":[[NaN]]}`, `{"data":[[` + strings.Repeat("[", 5000) + `]]}`,
		`{"data":[]}`, `{"data":null}`, `[]`, ``, `{"data":[[` + row + `]],"top_k":-9223372036854775808}`,
	} {
		f.Add([]byte(s), "application/json", "", false)
		f.Add([]byte(s), "application/json", "top_k=2", true)
	}
	f.Add([]byte(`{"data":[[1]]}`), "text/plain", "top_k=99999999999999999999", false)
	f.Fuzz(func(t *testing.T, body []byte, ctype, query string, stream bool) {
		if !fuzzable(body, ctype, query) {
			return
		}
		es.checkAnswer(t, es.serveBody("POST", "/predict?"+query, ctype, body, stream), false)
	})
}

// FuzzRouterPredictImage: POST /predict/image?query on the digits CNN, raw
// or multipart, with the query overrides (height, width, channels, resize,
// top_k) that once overflowed.
func FuzzRouterPredictImage(f *testing.F) {
	es := newEdgeServer(f, "digits_cnn.onnx", Config{MaxImagePixels: 1 << 20}, batcher.Config{MaxDelay: 0}, nil)
	png := digitPNG(f)
	for _, q := range []string{"", "top_k=3", "height=8&width=8", "height=9223372036854775807&width=9223372036854775807",
		"height=4294967296&width=4294967296", "height=-1&width=8", "height=0", "channels=3", "channels=-2", "resize=nearest", "resize=zzz"} {
		f.Add(png, "image/png", q, false, false)
		f.Add(png, "", q, true, true)
	}
	f.Add([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"), "image/gif", "", false, false)
	f.Add([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x7f\xff\xff\xff\x7f\xff\xff\xff\x08\x02\x00\x00\x00"), "image/png", "", false, false)
	f.Fuzz(func(t *testing.T, body []byte, ctype, query string, multi, stream bool) {
		if !fuzzable(body, ctype, query) {
			return
		}
		if multi {
			body, ctype = multipartImage(t, body)
		}
		es.checkAnswer(t, es.serveBody("POST", "/predict/image?"+query, ctype, body, stream), false)
	})
}

// multipartImage is body as the one file part "image" of a form.
func multipartImage(t *testing.T, body []byte) ([]byte, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	p, err := w.CreateFormFile("image", "x.png")
	if err == nil {
		_, err = p.Write(body)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

// FuzzRouterPredictBatch: POST /predict/batch, JSON or streaming NDJSON.
func FuzzRouterPredictBatch(f *testing.F) {
	es := newEdgeServer(f, "digits_mlp.onnx", Config{}, batcher.Config{MaxDelay: 0}, nil)
	row := strings.TrimSuffix(strings.Repeat("0.25,", 64), ",")
	f.Add([]byte(`{"items":[{"data":[[`+row+`]]},{"data":[[1]]}]}`), "application/json", false)
	f.Add([]byte(`{"data":[[`+row+`]]}`+"\n"+`{"data":[[`+row+`]],"id":"x"}`+"\n\n{"), "application/x-ndjson", true)
	f.Add([]byte(strings.Repeat("{}\n", 100)), "application/x-ndjson", false)
	f.Add([]byte(`{"items":null}`), "application/json", true)
	f.Add([]byte(`{"items":[`+strings.Repeat(`{"data":[[]]},`, 200)+`{}]}`), "application/json", false)
	f.Fuzz(func(t *testing.T, body []byte, ctype string, stream bool) {
		if !fuzzable(body, ctype) {
			return
		}
		resp := es.serveBody("POST", "/predict/batch", ctype, body, stream)
		if resp.StatusCode() == 200 && bytes.Contains(resp.Header.ContentType(), []byte("ndjson")) {
			return // per-line errors travel inside the 200 stream
		}
		es.checkAnswer(t, resp, false)
	})
}

// FuzzRouterV2Infer: POST /v2/models/digits_mlp/infer, JSON or with the
// binary tensor extension (a JSON header of hl bytes, then raw tensors).
func FuzzRouterV2Infer(f *testing.F) {
	es := newEdgeServer(f, "digits_mlp.onnx", Config{}, batcher.Config{MaxDelay: 0}, nil)
	name := es.m.Inputs()[0].Name
	row := strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")
	f.Add([]byte(`{"inputs":[{"name":"`+name+`","shape":[1,64],"datatype":"FP32","data":[`+row+`]}]}`), "", "", false)
	hdr := `{"inputs":[{"name":"` + name + `","shape":[1,64],"datatype":"FP32","parameters":{"binary_data_size":256}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]}`
	raw := make([]byte, 256)
	for i := 0; i < 64; i++ {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(0.5))
	}
	f.Add(append([]byte(hdr), raw...), strconv.Itoa(len(hdr)), "", true)
	f.Add(append([]byte(hdr), raw[:100]...), strconv.Itoa(len(hdr)), "", false)
	f.Add([]byte(hdr), "99999999999999999999", "", false)
	f.Add([]byte(`{"inputs":[{"name":"`+name+`","shape":[9223372036854775807,64],"datatype":"FP32","parameters":{"binary_data_size":18446744073709551615}}]}`), "", "", false)
	f.Add([]byte(`{"inputs":[{"name":"`+name+`","shape":[-1,64],"datatype":"FP32","data":[]}]}`), "", "/versions/1", false)
	f.Fuzz(func(t *testing.T, body []byte, hl, version string, stream bool) {
		if !fuzzable(body, hl, version) {
			return
		}
		var h []string
		if hl != "" {
			h = []string{v2HeaderLength, hl}
		}
		ctype := "application/json"
		if hl != "" {
			ctype = "application/octet-stream"
		}
		es.lastPath = nil
		resp := es.serveBody("POST", "/v2/models/digits_mlp"+version+"/infer", ctype, body, stream, h...)
		// V2's own error shape on the paths V2 owns; an odd version can
		// make the path one of fw's.
		es.checkAnswer(t, resp, bytes.HasPrefix(es.lastPath, []byte("/v2")))
	})
}

// FuzzRouterCompressed: compressed bodies (or bytes that only claim to be)
// on every JSON route, with any Content-Encoding and Accept-Encoding: every
// answer is a 200 or a documented error, and a compressed answer
// decompresses.
func FuzzRouterCompressed(f *testing.F) {
	es := newEdgeServer(f, "digits_mlp.onnx", Config{MaxBodyBytes: 1 << 20}, batcher.Config{MaxDelay: 0}, nil)
	name := es.m.Inputs()[0].Name
	// The seeds stay small: minimizing an input takes the fuzzer time
	// quadratic in its length. (Their answers are under minCompressBytes,
	// so TestCompressedResponses and FuzzAcceptEncoding cover compressing
	// them.)
	row := strings.TrimSuffix(strings.Repeat("0,", 64), ",")
	for _, s := range []string{
		`{"data":[[` + row + `]]}`,
		`{"inputs":[{"name":"` + name + `","shape":[1,64],"datatype":"FP32","data":[` + row + `]}]}`,
		`{"requests":[{"data":[[` + row + `]]}]}`,
		`{"data":[[` + row + `]]}` + "\n" + `{"data":[[1]]}` + "\n",
	} {
		for route := range uint8(4) {
			f.Add([]byte(s), "gzip", true, "gzip", false, route)
			f.Add([]byte(s), "deflate", true, "deflate;q=0.5, gzip;q=0.1", true, route)
			f.Add([]byte(s), "deflate", false, "*", false, route)
		}
	}
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, "x-gzip", false, "", true, uint8(1))
	f.Add([]byte{0x78, 0x9c}, "deflate, identity", false, "gzip", false, uint8(0))
	f.Add([]byte("{}"), "br", false, "br", false, uint8(3))
	routes := []struct{ path, ctype string }{
		{"/predict", "application/json"},
		{"/v2/models/digits_mlp/infer", "application/json"},
		{"/predict/batch", "application/json"},
		{"/predict/batch", "application/x-ndjson"},
	}
	// One writer of each, reset per input (a new one allocates a megabyte),
	// at the fastest level: compressing is most of a run's time.
	var b bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	zl, _ := zlib.NewWriterLevel(&b, zlib.BestSpeed)
	f.Fuzz(func(t *testing.T, body []byte, enc string, compress bool, accept string, stream bool, route uint8) {
		if !fuzzable(body, enc, accept) {
			return
		}
		if compress {
			b.Reset()
			var w interface {
				io.WriteCloser
				Reset(io.Writer)
			}
			switch strings.ToLower(strings.TrimSpace(enc)) {
			case "gzip":
				w = gz
			case "deflate":
				w = zl
			}
			if w != nil {
				w.Reset(&b)
				w.Write(body)
				w.Close()
				body = b.Bytes()
			}
		}
		rt := routes[int(route)%len(routes)]
		resp := es.serveBody("POST", rt.path, rt.ctype, body, stream, "Content-Encoding", enc, "Accept-Encoding", accept)
		if resp.StatusCode() == 200 {
			if ce := string(resp.Header.ContentEncoding()); ce != "" {
				if _, err := resp.BodyUncompressed(); err != nil || (ce != "gzip" && ce != "deflate") {
					t.Fatalf("Content-Encoding %q for Accept-Encoding %q: %v", ce, accept, err)
				}
			}
			return // per-line errors of NDJSON travel inside the 200 stream
		}
		es.checkAnswer(t, resp, strings.HasPrefix(rt.path, "/v2"))
	})
}
