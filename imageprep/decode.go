// Package imageprep turns untrusted encoded pictures (PNG, JPEG, GIF, BMP,
// WebP) into the float32 input rows a model's preprocessing.image recipe
// asks for (docs/model-format.md). It is the decoder behind the server's
// POST /predict/image.
//
// The pipeline is: Decode (header checked against Limits before any pixel is
// decoded), then Preprocess, in one of two forms. The simple form converts
// to 1 or 3 channels, stretches to the recipe's size, inverts, scales and
// normalises. The steps form (steps.go) is the model's torchvision eval
// transform, reproduced bit for bit: Pillow's and PyTorch's uint8 resampling
// (resample.go), center crop, grayscale, then one float lookup per value.
// Both write NCHW. Batch does both for several images and returns one
// engine.Tensor; Compile prepares a recipe once (a Pipeline, which keeps
// its buffers between pictures); VerifyImage runs a model's image test case.
//
// The package keeps no mutable state of its own. Importing it registers the
// png, jpeg, gif, bmp and webp decoders in the standard image package's
// format table (once, as blank imports do).
package imageprep

import (
	"bytes"
	"fmt"
	"image"
	_ "image/gif"  // registers "gif" with image.Decode
	_ "image/jpeg" // registers "jpeg" with image.Decode
	_ "image/png"  // registers "png" with image.Decode
	"strings"

	_ "golang.org/x/image/bmp"  // registers "bmp" with image.Decode
	_ "golang.org/x/image/webp" // registers "webp" with image.Decode
)

// DefaultMaxPixels is the pixel budget (width*height, as declared by the
// image header) used when Limits.MaxPixels is zero or negative.
const DefaultMaxPixels int64 = 40_000_000

// DefaultMaxBytes is the encoded-size budget used when Limits.MaxBytes is zero.
const DefaultMaxBytes int64 = 64 << 20

// Limits bounds the work one untrusted image may cause.
type Limits struct {
	// MaxPixels caps width*height as declared in the image header; larger
	// images are refused with a *TooLargeError before their pixels are
	// decoded. Zero or negative means DefaultMaxPixels.
	MaxPixels int64
	// MaxBytes caps the encoded size. Zero means DefaultMaxBytes; negative
	// means no cap (the caller already bounds the request body).
	MaxBytes int64
}

func (l Limits) maxPixels() int64 {
	if l.MaxPixels <= 0 {
		return DefaultMaxPixels
	}
	return l.MaxPixels
}

func (l Limits) maxBytes() int64 {
	if l.MaxBytes == 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

// ContentTypes lists the MIME types Decode accepts, for Accept headers,
// OpenAPI documents and error messages. The slice is new on every call.
func ContentTypes() []string {
	return []string{"image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp"}
}

// IsContentType reports whether the media type (lower case, no parameters)
// is one of ContentTypes, without allocating.
func IsContentType(mediaType string) bool {
	switch mediaType {
	case "image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp":
		return true
	}
	return false
}

// accepted reports whether format (an image package format name) is one
// Decode accepts; other decoders registered elsewhere in the binary are
// refused.
func accepted(format string) bool {
	switch format {
	case "png", "jpeg", "webp", "gif", "bmp":
		return true
	}
	return false
}

// TooLargeError reports an image over Limits: too many pixels declared in
// its header, or too many encoded bytes. The HTTP layer answers 413.
type TooLargeError struct {
	Format    string // the detected format ("png", ...); empty for a byte-size refusal
	Width     int    // declared width in pixels (0 for a byte-size refusal)
	Height    int    // declared height in pixels (0 for a byte-size refusal)
	MaxPixels int64  // the pixel limit that was exceeded (0 for a byte-size refusal)
	Bytes     int64  // encoded size (set for a byte-size refusal)
	MaxBytes  int64  // the byte limit that was exceeded (0 for a pixel refusal)
}

// Error says what was too large and how to get under the limit.
func (e *TooLargeError) Error() string {
	if e.MaxBytes > 0 {
		return fmt.Sprintf("image is %d bytes, over the limit of %d bytes; send a smaller (downscaled or more compressed) image", e.Bytes, e.MaxBytes)
	}
	return fmt.Sprintf("%s image is %dx%d = %d pixels, over the limit of %d pixels; downscale it (the model only needs its own input size) and send it again",
		e.Format, e.Width, e.Height, int64(e.Width)*int64(e.Height), e.MaxPixels)
}

// FormatError reports bytes that are not an image in an accepted format:
// unknown type, corrupt or truncated data. The HTTP layer answers 400.
type FormatError struct {
	Format string // the detected format, when the header was recognised
	Err    error  // the decoder's complaint

	panicked bool // a decoder panicked; tests and fuzzing treat it as a bug
}

// Error names the problem and lists the accepted types.
func (e *FormatError) Error() string {
	what := "cannot decode image"
	if e.Format != "" {
		what = "cannot decode " + e.Format + " image"
	}
	return fmt.Sprintf("%s: %v; send a valid image of one of the accepted types: %s",
		what, e.Err, strings.Join(ContentTypes(), ", "))
}

// Unwrap returns the decoder's error.
func (e *FormatError) Unwrap() error { return e.Err }

// Decode decodes one untrusted encoded image. It reads the header first
// (image.DecodeConfig) and refuses, before decoding any pixel, an image whose
// declared width*height exceeds lim.MaxPixels (*TooLargeError). Bytes that are
// not a PNG, JPEG, GIF, BMP or WebP image, or are corrupt or truncated, give a
// *FormatError. For an animated GIF only the first frame is decoded. The
// second result is the format name ("png", "jpeg", "gif", "bmp", "webp").
//
// A panic inside a third-party decoder is turned into a *FormatError rather
// than taking the server down.
func Decode(data []byte, lim Limits) (image.Image, string, error) {
	if mb := lim.maxBytes(); mb > 0 && int64(len(data)) > mb {
		return nil, "", &TooLargeError{Bytes: int64(len(data)), MaxBytes: mb}
	}
	if len(data) == 0 {
		return nil, "", &FormatError{Err: fmt.Errorf("empty body")}
	}
	cfg, format, err := safeDecodeConfig(data)
	if err != nil {
		return nil, format, err
	}
	if !accepted(format) {
		return nil, format, &FormatError{Format: format, Err: fmt.Errorf("format %q is not accepted", format)}
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, format, &FormatError{Format: format, Err: fmt.Errorf("header declares an empty %dx%d image", cfg.Width, cfg.Height)}
	}
	maxPx := lim.maxPixels()
	if pixelsOver(cfg.Width, cfg.Height, maxPx) {
		return nil, format, &TooLargeError{Format: format, Width: cfg.Width, Height: cfg.Height, MaxPixels: maxPx}
	}
	img, format2, err := safeDecode(data)
	if err != nil {
		if fe, ok := err.(*FormatError); ok && fe.Format == "" {
			fe.Format = format
		}
		return nil, format, err
	}
	if format2 != format {
		return nil, format, &FormatError{Format: format, Err: fmt.Errorf("header says %s but the body decodes as %s", format, format2)}
	}
	b := img.Bounds()
	if b.Empty() {
		return nil, format, &FormatError{Format: format, Err: fmt.Errorf("decoded image is empty")}
	}
	if pixelsOver(b.Dx(), b.Dy(), maxPx) {
		// The header agreed to the limit but the pixels do not: treat as corrupt.
		return nil, format, &FormatError{Format: format, Err: fmt.Errorf("decoded size %dx%d disagrees with the header's %dx%d", b.Dx(), b.Dy(), cfg.Width, cfg.Height)}
	}
	return img, format, nil
}

// pixelsOver reports whether a w x h image (w, h positive) has more than max
// pixels, without overflowing however large the sides are.
func pixelsOver(w, h int, max int64) bool {
	if int64(w) > max || int64(h) > max {
		return true
	}
	return int64(w) > max/int64(h)
}

func safeDecodeConfig(data []byte) (cfg image.Config, format string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &FormatError{Format: format, Err: fmt.Errorf("decoder failed on the header: %v", r), panicked: true}
		}
	}()
	cfg, format, err = image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return cfg, format, &FormatError{Format: format, Err: err}
	}
	return cfg, format, nil
}

func safeDecode(data []byte) (img image.Image, format string, err error) {
	defer func() {
		if r := recover(); r != nil {
			img = nil
			err = &FormatError{Format: format, Err: fmt.Errorf("decoder failed: %v", r), panicked: true}
		}
	}()
	img, format, err = image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, format, &FormatError{Format: format, Err: err}
	}
	return img, format, nil
}
