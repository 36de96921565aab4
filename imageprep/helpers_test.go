package imageprep

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/fw-serve/fw/engine"
	"golang.org/x/image/bmp"
)

// Tiny valid WebP files (1x1), as used by feature-detection scripts: lossy
// (VP8), lossless (VP8L) and lossy with alpha (VP8X + ALPH).
const (
	webpLossyB64     = "UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA"
	webpLosslessB64  = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="
	webpWithAlphaB64 = "UklGRkoAAABXRUJQVlA4WAoAAAAQAAAAAAAAAAAAQUxQSAwAAAARBxAR/Q9ERP8DAABWUDggGAAAABQBAJ0BKgEAAQAAAP4AAA3AAP7mtQAAAA=="
)

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pattern is a small RGB test picture with distinct values everywhere.
func pattern(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x * 255 / max(w-1, 1)), uint8(y * 255 / max(h-1, 1)), uint8((x + y) * 20), 255})
		}
	}
	return img
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeJPEG(t testing.TB, img image.Image, q int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeGIF(t testing.TB, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := gif.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeBMP(t testing.TB, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := bmp.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pngWithSize re-encodes a 1x1 PNG whose IHDR claims w x h (CRC fixed up),
// cut right after the IHDR chunk so no pixel data follows.
func pngWithSize(t testing.TB, w, h uint32) []byte {
	t.Helper()
	b := encodePNG(t, image.NewGray(image.Rect(0, 0, 1, 1)))
	// 8-byte signature, then IHDR: length(4) "IHDR"(4) data(13) crc(4).
	if string(b[12:16]) != "IHDR" {
		t.Fatalf("unexpected PNG layout % x", b[:16])
	}
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b[:33]
}

// hide wraps an image so only the image.Image interface is visible, forcing
// the generic At path.
type hide struct{ image.Image }

func near(a, b, tol float32) bool {
	d := a - b
	return d <= tol && d >= -tol
}

func assertNear(t *testing.T, got, want []float32, tol float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("len %d, want %d", len(got), len(want))
	}
	for i := range got {
		if !near(got[i], want[i], tol) {
			t.Fatalf("value %d = %v, want %v (±%v)\ngot  %v\nwant %v", i, got[i], want[i], tol, got, want)
		}
	}
}

// raw is a recipe producing the unscaled 0..255 values.
func raw(h, w, c int, resize string) engine.ImagePreprocessing {
	return engine.ImagePreprocessing{Height: h, Width: w, Channels: c, Layout: "NCHW", Resize: resize, Scale: 1}
}
