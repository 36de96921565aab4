package imageprep

import "image"

// rowSource converts one source row at a time into float32 values on the
// 0..255 scale, c per pixel (RGB or luminance), reading Pix directly for the
// image types decoders produce and falling back to At for the rest.
type rowSource struct {
	img   image.Image
	min   image.Point // img.Bounds().Min
	w     int         // img.Bounds().Dx()
	c     int         // 1 or 3
	pal   [256][3]uint8
	ycbcr struct{ hs, vs uint } // chroma subsampling shifts for *image.YCbCr
	fast  bool                  // the type has a direct path
	cb    []uint8               // one row's upsampled chroma (chromaRow's scratch)
	cr    []uint8
}

func newRowSource(img image.Image, c int) rowSource {
	b := img.Bounds()
	s := rowSource{img: img, min: b.Min, w: b.Dx(), c: c}
	switch m := img.(type) {
	case *image.RGBA, *image.NRGBA, *image.Gray:
		s.fast = true
	case *image.YCbCr:
		s.fast = s.setSubsample(m)
		s.chromaScratch()
	case *image.NYCbCrA:
		s.fast = s.setSubsample(&m.YCbCr)
		s.chromaScratch()
	case *image.Paletted:
		s.fast = true
		for i, col := range m.Palette {
			if i >= len(s.pal) {
				break
			}
			if col == nil {
				continue
			}
			r, g, b, _ := col.RGBA() // premultiplied: over black
			s.pal[i] = [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
		}
	}
	return s
}

// chromaScratch makes the chroma rows chromaRow fills, one allocation for a
// whole row of both planes.
func (s *rowSource) chromaScratch() {
	buf := make([]uint8, 2*s.w)
	s.cb, s.cr = buf[:s.w:s.w], buf[s.w:]
}

// setSubsample records the chroma shifts of m, or reports false for a
// layout the direct path does not handle (negative coordinates, unknown
// ratio), which then goes through At.
func (s *rowSource) setSubsample(m *image.YCbCr) bool {
	if m.Rect.Min.X < 0 || m.Rect.Min.Y < 0 {
		return false
	}
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		s.ycbcr.hs, s.ycbcr.vs = 0, 0
	case image.YCbCrSubsampleRatio422:
		s.ycbcr.hs, s.ycbcr.vs = 1, 0
	case image.YCbCrSubsampleRatio420:
		s.ycbcr.hs, s.ycbcr.vs = 1, 1
	case image.YCbCrSubsampleRatio440:
		s.ycbcr.hs, s.ycbcr.vs = 0, 1
	case image.YCbCrSubsampleRatio411:
		s.ycbcr.hs, s.ycbcr.vs = 2, 0
	case image.YCbCrSubsampleRatio410:
		s.ycbcr.hs, s.ycbcr.vs = 2, 1
	default:
		return false
	}
	return true
}

// gray8 is Pillow's RGB to L conversion (ITU-R 601-2 luma, rounded).
func gray8(r, g, b uint8) uint8 {
	return uint8((19595*uint32(r) + 38470*uint32(g) + 7471*uint32(b) + 1<<15) >> 16)
}

// over composites a straight (non-premultiplied) 8-bit value over black.
func over(v, a uint8) uint8 {
	return uint8((uint32(v)*uint32(a) + 127) / 255)
}

// fill writes the pixels of row y (0-based from the top of the bounds) at
// columns cols (0-based from the left) into dst, c values per column.
func (s *rowSource) fill(y int, cols []int32, dst []float32) {
	if !s.fast {
		s.fillAt(y, cols, dst)
		return
	}
	ay, x0, c := s.min.Y+y, s.min.X, s.c
	dst = dst[:len(cols)*c]
	switch m := s.img.(type) {
	case *image.Gray:
		row := m.Pix[m.PixOffset(x0, ay):][:s.w]
		if c == 1 {
			for j, x := range cols {
				dst[j] = float32(row[x])
			}
			return
		}
		for j, x := range cols {
			f := float32(row[x])
			d := dst[3*j : 3*j+3 : 3*j+3]
			d[0], d[1], d[2] = f, f, f
		}
	case *image.RGBA:
		row := m.Pix[m.PixOffset(x0, ay):][:4*s.w]
		for j, x := range cols {
			p := row[4*x : 4*x+4 : 4*x+4] // premultiplied: already over black
			put(dst, c, j, p[0], p[1], p[2])
		}
	case *image.NRGBA:
		row := m.Pix[m.PixOffset(x0, ay):][:4*s.w]
		for j, x := range cols {
			p := row[4*x : 4*x+4 : 4*x+4]
			r, g, b := p[0], p[1], p[2]
			if a := p[3]; a != 0xff {
				r, g, b = over(r, a), over(g, a), over(b, a)
			}
			put(dst, c, j, r, g, b)
		}
	case *image.Paletted:
		row := m.Pix[m.PixOffset(x0, ay):][:s.w]
		for j, x := range cols {
			p := &s.pal[row[x]]
			put(dst, c, j, p[0], p[1], p[2])
		}
	case *image.YCbCr:
		s.fillYCbCr(m, ay, nil, cols, dst)
	case *image.NYCbCrA:
		s.fillYCbCr(&m.YCbCr, ay, m.A[m.AOffset(x0, ay):][:s.w], cols, dst)
	}
}

// put stores one 8-bit RGB pixel as c float values at column j.
func put(dst []float32, c, j int, r, g, b uint8) {
	if c == 1 {
		dst[j] = float32(gray8(r, g, b))
		return
	}
	d := dst[3*j : 3*j+3 : 3*j+3]
	d[0], d[1], d[2] = float32(r), float32(g), float32(b)
}

// fillYCbCr converts row ay (absolute) of m at cols, compositing over black
// with alpha (the row of the alpha plane) when it is not nil. It decodes as
// libjpeg(-turbo) does, which is what Pillow, and so a user's PyTorch
// pipeline, gets from the same file: 4:2:0 and 4:2:2 chroma is upsampled
// with libjpeg's "fancy" triangle filter (not repeated per 2x2 block, which
// differs by tens of levels at colour edges), and the colour conversion is
// libjpeg's fixed-point one (jdcolor.c). Other layouts repeat chroma.
func (s *rowSource) fillYCbCr(m *image.YCbCr, ay int, alpha []uint8, cols []int32, dst []float32) {
	x0, c := s.min.X, s.c
	yrow := m.Y[m.YOffset(x0, ay):][:s.w]
	cb, cr := s.chromaRow(m, ay, cols)
	for j, x := range cols {
		r8, g8, b8 := jpegRGB(yrow[x], cb[j], cr[j])
		if alpha != nil {
			if a := alpha[x]; a != 0xff {
				r8, g8, b8 = over(r8, a), over(g8, a), over(b8, a)
			}
		}
		put(dst, c, j, r8, g8, b8)
	}
}

// chromaRow returns the Cb and Cr values of row ay at cols, upsampled as
// libjpeg does (fancyChroma) where the layout allows, else repeated.
func (s *rowSource) chromaRow(m *image.YCbCr, ay int, cols []int32) ([]uint8, []uint8) {
	if cap(s.cb) < len(cols) {
		s.chromaScratch()
	}
	cb, cr := s.cb[:len(cols)], s.cr[:len(cols)]
	hs, vs := s.ycbcr.hs, s.ycbcr.vs
	x0 := s.min.X
	if m.Rect.Min == (image.Point{}) && hs == 1 && (vs == 1 || vs == 0) {
		fancyChroma(m.Cb, m, ay, vs == 1, cols, cb)
		fancyChroma(m.Cr, m, ay, vs == 1, cols, cr)
		return cb, cr
	}
	cbase := ((ay >> vs) - (m.Rect.Min.Y >> vs)) * m.CStride
	cmin := m.Rect.Min.X >> hs
	for j, x := range cols {
		ci := cbase + ((x0 + int(x)) >> hs) - cmin
		cb[j], cr[j] = m.Cb[ci], m.Cr[ci]
	}
	return cb, cr
}

// fancyChroma upsamples one chroma plane of a 4:2:0 (v2) or 4:2:2 image
// whose bounds start at 0,0 to full resolution at row y and columns cols, as
// libjpeg's h2v2_fancy_upsample and h2v1_fancy_upsample (jdsample.c) do: each
// output sample weighs the nearest chroma sample 3/4 and the next one 1/4 in
// each subsampled direction, with libjpeg's rounding, and edge samples
// replicated.
func fancyChroma(plane []uint8, m *image.YCbCr, y int, v2 bool, cols []int32, out []uint8) {
	cw := (m.Rect.Max.X + 1) >> 1 // chroma columns
	if !v2 {
		row := plane[y*m.CStride:][:cw]
		for j, x := range cols {
			c := int(x) >> 1
			v := int(row[c])
			switch {
			case x&1 == 0 && c == 0, x&1 == 1 && c == cw-1:
				out[j] = uint8(v)
			case x&1 == 0:
				out[j] = uint8((3*v + int(row[c-1]) + 1) >> 2)
			default:
				out[j] = uint8((3*v + int(row[c+1]) + 2) >> 2)
			}
		}
		return
	}
	ch := (m.Rect.Max.Y + 1) >> 1 // chroma rows
	cy := y >> 1
	ny := cy - 1 // the nearer neighbouring chroma row: above for even rows
	if y&1 == 1 {
		ny = cy + 1
	}
	ny = min(max(ny, 0), ch-1)
	near := plane[cy*m.CStride:][:cw]
	other := plane[ny*m.CStride:][:cw]
	sum := func(c int) int { return 3*int(near[c]) + int(other[c]) }
	for j, x := range cols {
		c := int(x) >> 1
		t := sum(c)
		switch {
		case x&1 == 0 && c == 0:
			out[j] = uint8((4*t + 8) >> 4)
		case x&1 == 0:
			out[j] = uint8((3*t + sum(c-1) + 8) >> 4)
		case c == cw-1:
			out[j] = uint8((4*t + 7) >> 4)
		default:
			out[j] = uint8((3*t + sum(c+1) + 7) >> 4)
		}
	}
}

// jpegRGB is libjpeg's YCbCr to RGB conversion (jdcolor.c, 16-bit fixed
// point with its rounding), so decoded pixels equal libjpeg's.
func jpegRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	const half = 1 << 15
	yy, b, r := int32(y), int32(cb)-128, int32(cr)-128
	red := yy + (91881*r+half)>>16
	green := yy + (-22554*b+half-46802*r)>>16
	blue := yy + (116130*b+half)>>16
	return clamp8(red), clamp8(green), clamp8(blue)
}

func clamp8(v int32) uint8 {
	return uint8(min(max(v, 0), 255))
}

// fillAt is the generic path through image.Image's At, on 16-bit values.
func (s *rowSource) fillAt(y int, cols []int32, dst []float32) {
	ay := s.min.Y + y
	for x, cx := range cols {
		col := s.img.At(s.min.X+int(cx), ay)
		var r, g, b uint32
		if col != nil {
			r, g, b, _ = col.RGBA() // premultiplied: over black
		}
		if s.c == 1 {
			if r%257 == 0 && g%257 == 0 && b%257 == 0 { // 8-bit source: same as the fast paths
				dst[x] = float32(gray8(uint8(r/257), uint8(g/257), uint8(b/257)))
				continue
			}
			l := (19595*r + 38470*g + 7471*b + 1<<15) >> 16
			dst[x] = float32(l) / 257
			continue
		}
		dst[3*x], dst[3*x+1], dst[3*x+2] = float32(r)/257, float32(g)/257, float32(b)/257
	}
}
