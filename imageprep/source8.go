package imageprep

import (
	"image"
	"image/color"
)

// pilSource converts rows of a decoded picture to 8-bit RGB or L the way
// Pillow's Image.convert("RGB") / convert("L") does on the image Pillow
// opens from the same file, which is what a torchvision pipeline's loader
// (torchvision.datasets.folder.pil_loader: Image.open(f).convert("RGB"))
// hands the transform:
//
//   - alpha is dropped, not composited (RGBA and LA to RGB keep the colour);
//   - palette pictures take the palette's colour;
//   - 16-bit grayscale PNGs (Pillow's mode I;16) clip to 255, as Pillow's
//     I;16 to RGB and L conversions do; 16-bit colour PNGs keep the high byte
//     (Pillow reads them as 8-bit RGB/RGBA that way);
//   - JPEG YCbCr is converted as libjpeg does (see rowSource.fillYCbCr);
//   - L is Pillow's ITU-R 601-2 luma, (19595 R + 38470 G + 7471 B + 32768) >> 16.
//
// Other picture types go through Go's colour model (color.NRGBAModel).
type pilSource struct {
	rs   rowSource // for the YCbCr decoding and the picture's bounds
	gray bool      // convert("L") instead of "RGB"
	pal  [256][3]uint8
	cols []int32 // the window's columns, for chromaRow
	x0   int     // first column of the window
}

func newPILSource(img image.Image, gray bool, x0, w int, cols []int32) *pilSource {
	s := &pilSource{rs: newRowSource(img, 3), gray: gray, x0: x0, cols: cols[:w]}
	for i := range s.cols {
		s.cols[i] = int32(x0 + i)
	}
	if m, ok := img.(*image.Paletted); ok {
		for i, col := range m.Palette {
			if i >= len(s.pal) {
				break
			}
			if col == nil {
				continue
			}
			c := color.NRGBAModel.Convert(col).(color.NRGBA)
			s.pal[i] = [3]uint8{c.R, c.G, c.B}
		}
	}
	return s
}

// put stores one pixel at column j of dst.
func (s *pilSource) put(dst []byte, j int, r, g, b uint8) {
	if s.gray {
		dst[j] = gray8(r, g, b)
		return
	}
	d := dst[3*j : 3*j+3 : 3*j+3]
	d[0], d[1], d[2] = r, g, b
}

// fill converts row y (0-based from the top of the picture) at the window's
// columns into dst (len(cols)*channels bytes).
func (s *pilSource) fill(y int, dst []byte) {
	rs := &s.rs
	ay := rs.min.Y + y
	ax := rs.min.X + s.x0
	n := len(s.cols)
	switch m := rs.img.(type) {
	case *image.Gray:
		row := m.Pix[m.PixOffset(ax, ay):][:n]
		if s.gray {
			copy(dst, row)
			return
		}
		for j, v := range row {
			s.put(dst, j, v, v, v)
		}
	case *image.Gray16:
		row := m.Pix[m.PixOffset(ax, ay):][:2*n]
		for j := 0; j < n; j++ {
			v := uint16(row[2*j])<<8 | uint16(row[2*j+1])
			g := uint8(min(v, 255))
			s.put(dst, j, g, g, g)
		}
	case *image.RGBA:
		row := m.Pix[m.PixOffset(ax, ay):][:4*n]
		for j := 0; j < n; j++ {
			p := row[4*j : 4*j+4 : 4*j+4]
			if p[3] == 0xff {
				s.put(dst, j, p[0], p[1], p[2])
				continue
			}
			c := color.NRGBAModel.Convert(color.RGBA{p[0], p[1], p[2], p[3]}).(color.NRGBA)
			s.put(dst, j, c.R, c.G, c.B)
		}
	case *image.NRGBA:
		row := m.Pix[m.PixOffset(ax, ay):][:4*n]
		for j := 0; j < n; j++ {
			p := row[4*j : 4*j+4 : 4*j+4]
			s.put(dst, j, p[0], p[1], p[2])
		}
	case *image.RGBA64:
		row := m.Pix[m.PixOffset(ax, ay):][:8*n]
		for j := 0; j < n; j++ {
			p := row[8*j : 8*j+8 : 8*j+8]
			if p[6] == 0xff && p[7] == 0xff {
				s.put(dst, j, p[0], p[2], p[4])
				continue
			}
			c := color.NRGBA64Model.Convert(m.RGBA64At(ax+j, ay)).(color.NRGBA64)
			s.put(dst, j, uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8))
		}
	case *image.NRGBA64:
		row := m.Pix[m.PixOffset(ax, ay):][:8*n]
		for j := 0; j < n; j++ {
			p := row[8*j : 8*j+8 : 8*j+8]
			s.put(dst, j, p[0], p[2], p[4])
		}
	case *image.Paletted:
		row := m.Pix[m.PixOffset(ax, ay):][:n]
		for j, i := range row {
			p := &s.pal[i]
			s.put(dst, j, p[0], p[1], p[2])
		}
	case *image.YCbCr:
		if rs.fast {
			s.fillYCbCr(m, ay, dst)
			return
		}
		s.fillAt(ay, ax, dst)
	case *image.NYCbCrA:
		if rs.fast {
			s.fillYCbCr(&m.YCbCr, ay, dst)
			return
		}
		s.fillAt(ay, ax, dst)
	default:
		s.fillAt(ay, ax, dst)
	}
}

// fillYCbCr decodes a JPEG row as libjpeg does (rowSource's chroma
// upsampling and colour conversion); any alpha plane is ignored.
func (s *pilSource) fillYCbCr(m *image.YCbCr, ay int, dst []byte) {
	rs := &s.rs
	yrow := m.Y[m.YOffset(rs.min.X, ay):][:rs.w]
	cb, cr := rs.chromaRow(m, ay, s.cols)
	for j, x := range s.cols {
		r, g, b := jpegRGB(yrow[x], cb[j], cr[j])
		s.put(dst, j, r, g, b)
	}
}

// fillAt is the generic path: Go's conversion to non-premultiplied 8-bit.
func (s *pilSource) fillAt(ay, ax int, dst []byte) {
	for j := range s.cols {
		c := color.NRGBAModel.Convert(s.rs.img.At(ax+j, ay)).(color.NRGBA)
		s.put(dst, j, c.R, c.G, c.B)
	}
}
