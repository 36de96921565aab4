package imageprep

import (
	"fmt"
	"image"
	"math"

	"github.com/fw-serve/fw/engine"
)

// The steps form of preprocessing.image (engine.ImageStep): the user's
// torchvision eval transform, reproduced step by step on 8-bit pictures
// until to_tensor / to_dtype, then as one float32 lookup per value.

type opKind uint8

const (
	opSource opKind = iota // the decoded picture, converted to RGB or L
	opResize
	opCrop
	opGray
	opSame // a resize that keeps the size (torchvision returns the picture as is)
)

// pixelOp is one compiled step before the float conversion.
type pixelOp struct {
	kind      opKind
	kernel    kernelKind // resize and grayscale: Pillow's or PyTorch's
	filter    filterKind
	antialias bool
	size      []int // resize: [], [short] or [h, w]; crop: [h, w]
	maxSize   int   // resize: 0 for none
	channels  int   // grayscale: 1 or 3
}

// program is a compiled steps list.
type program struct {
	gray    bool // the loader converts to L instead of RGB
	ops     []pixelOp
	c, h, w int             // the output tensor's channels and size
	lut     [3][256]float32 // output channel, 8-bit value: the float the tensor gets
}

// compileSteps turns a valid steps list into a program.
func compileSteps(p engine.ImagePreprocessing) (*program, error) {
	sum, err := p.CheckSteps()
	if err != nil {
		return nil, err
	}
	if sum.Channels != p.Channels || sum.Height != p.Height || sum.Width != p.Width {
		return nil, fmt.Errorf("preprocessing.image.steps produce %d channel(s) of %dx%d but the recipe declares channels %d, %dx%d; fix the model's fw.json", sum.Channels, sum.Height, sum.Width, p.Channels, p.Height, p.Width)
	}
	if p.Layout != "" && p.Layout != "NCHW" && p.Layout != "nchw" {
		return nil, fmt.Errorf("preprocessing.image.layout %q is not supported; only NCHW is", p.Layout)
	}
	pr := &program{c: sum.Channels, h: sum.Height, w: sum.Width}
	kernel := kernelPillow
	var scale func(v float32) float32
	var norms []engine.ImageStep
	for _, s := range p.Steps {
		switch s.Op {
		case engine.StepConvert:
			pr.gray = s.Mode == "L"
		case engine.StepGrayscale:
			pr.ops = append(pr.ops, pixelOp{kind: opGray, kernel: kernel, channels: s.Channels})
		case engine.StepResize:
			f, _ := parseFilter(s.Interpolation)
			op := pixelOp{kind: opResize, kernel: kernel, filter: f, antialias: *s.Antialias, size: s.Size}
			if kernel == kernelPillow && f == filterNearestExact {
				op.filter = filterNearest // torchvision hands Pillow NEAREST for it
			}
			if s.MaxSize != nil {
				op.maxSize = *s.MaxSize
			}
			pr.ops = append(pr.ops, op)
		case engine.StepCenterCrop:
			pr.ops = append(pr.ops, pixelOp{kind: opCrop, size: s.Size})
		case engine.StepToImage:
			kernel = kernelTorch
		case engine.StepToTensor:
			scale = func(v float32) float32 { return v / 255 }
		case engine.StepToDtype:
			inv := float32(divide(1, 255)) // Python's 1.0 / 255, then float32 as PyTorch's mul_ takes it
			scale = func(v float32) float32 { return v * inv }
		case engine.StepNormalize:
			norms = append(norms, s)
		}
	}
	for c := 0; c < pr.c; c++ {
		for v := 0; v < 256; v++ {
			f := scale(float32(v))
			for _, n := range norms {
				m, sd := perChannelValue(n.Mean, c), perChannelValue(n.Std, c)
				f = float32(f-float32(m)) / float32(sd)
			}
			pr.lut[c][v] = f
		}
	}
	return pr, nil
}

// divide is a/b at run time (a constant expression would be exact, not the
// double Python computes).
func divide(a, b float64) float64 { return a / b }

func perChannelValue(v []float64, c int) float64 {
	if len(v) == 1 {
		return v[0]
	}
	return v[c]
}

// rect is a window of a picture: columns x0..x0+w-1, rows y0..y0+h-1.
type rect struct{ x0, y0, w, h int }

func (r rect) empty() bool { return r.w <= 0 || r.h <= 0 }

// intersect clips r to a w x h picture.
func (r rect) clip(w, h int) rect {
	x0, y0 := max(r.x0, 0), max(r.y0, 0)
	x1, y1 := min(r.x0+r.w, w), min(r.y0+r.h, h)
	if x1 <= x0 || y1 <= y0 {
		return rect{x0: x0, y0: y0}
	}
	return rect{x0, y0, x1 - x0, y1 - y0}
}

// stage is one picture of the chain: the source, or the result of a step.
// Only its window (what later steps read) is ever computed.
type stage struct {
	kind         opKind
	op           *pixelOp
	fullW, fullH int
	c            int
	win          rect
	left, top    int // crop: this picture's origin in the previous one's coordinates
	tx, ty       *axisTaps
	plane        []byte // resize: the window, computed
	buf          []byte // lazy stages: one row
}

// workspace holds one picture's buffers, kept between pictures by a
// Pipeline's pool so the request path allocates almost nothing.
type workspace struct {
	stages  []stage
	taps    [][2]axisTaps
	keys    [][2]tapKey
	bufs    [][]byte
	temps   [][]byte
	acc     []int32
	cols    []int32
	scratch []float64
	src     *pilSource
}

func (ws *workspace) prepare(n int) {
	if cap(ws.stages) < n {
		ws.stages = make([]stage, n)
		ws.taps = make([][2]axisTaps, n)
		ws.keys = make([][2]tapKey, n)
		ws.bufs = make([][]byte, n)
		ws.temps = make([][]byte, n)
	}
	ws.stages = ws.stages[:n]
	for i := range ws.stages {
		ws.stages[i] = stage{}
	}
}

// taps returns the coefficients for key, computing them unless slot i axis a
// already holds them.
func (ws *workspace) tapsFor(i, a int, key tapKey) (*axisTaps, error) {
	t := &ws.taps[i][a]
	if ws.keys[i][a] == key && t.ksize > 0 {
		return t, nil
	}
	ws.keys[i][a] = tapKey{}
	if err := computeTaps(key, t, &ws.scratch); err != nil {
		return nil, err
	}
	ws.keys[i][a] = key
	return t, nil
}

// resizedSize is torchvision's _compute_resized_output_size: the shorter
// side to size[0] keeping the aspect ratio (truncated, as Python's int()),
// capped by maxSize, or exactly size [h, w].
func resizedSize(h, w int, size []int, maxSize int) (int, int) {
	if len(size) == 2 {
		return size[0], size[1]
	}
	short, long := w, h
	if w > h {
		short, long = h, w
	}
	var newShort, newLong int
	if len(size) == 0 {
		newShort, newLong = int(float64(maxSize*short)/float64(long)), maxSize
	} else {
		newShort, newLong = size[0], int(float64(size[0]*long)/float64(short))
		if maxSize > 0 && newLong > maxSize {
			newShort, newLong = int(float64(maxSize*newShort)/float64(newLong)), maxSize
		}
	}
	if w <= h {
		return newLong, newShort
	}
	return newShort, newLong
}

// cropOrigin is torchvision's center_crop: pad with zeros (left/top get the
// smaller half) where the crop is larger than the picture, then take the
// crop at round((size - crop) / 2) (Python's round: half to even). It
// returns the crop's top-left corner in the unpadded picture's coordinates.
func cropOrigin(h, w, ch, cw int) (top, left int) {
	var padL, padT, padR, padB int
	if cw > w {
		padL, padR = (cw-w)/2, (cw-w+1)/2
	}
	if ch > h {
		padT, padB = (ch-h)/2, (ch-h+1)/2
	}
	ph, pw := h+padT+padB, w+padL+padR
	if ph == ch && pw == cw {
		return -padT, -padL
	}
	t := int(math.RoundToEven(float64(ph-ch) / 2))
	l := int(math.RoundToEven(float64(pw-cw) / 2))
	return t - padT, l - padL
}

// maxStepSide bounds any side a resize may make, however the picture's
// aspect ratio stretches it.
const maxStepSide = 1 << 30

// run preprocesses one decoded picture into dst (c*h*w values, NCHW).
// maxPixels bounds every picture the steps compute.
func (pr *program) run(ws *workspace, img image.Image, maxPixels int64, dst []float32) error {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	if sw <= 0 || sh <= 0 {
		return fmt.Errorf("imageprep: the image is empty")
	}
	if sw > maxSourceSide || sh > maxSourceSide {
		return fmt.Errorf("imageprep: a %dx%d image is too large to preprocess; decode it with Decode, which enforces Limits", sw, sh)
	}
	n := len(pr.ops) + 1
	ws.prepare(n)
	st := ws.stages
	c := 3
	if pr.gray {
		c = 1
	}
	st[0] = stage{kind: opSource, fullW: sw, fullH: sh, c: c}
	// Forward: the size of every picture.
	for i := range pr.ops {
		op := &pr.ops[i]
		prev, s := &st[i], &st[i+1]
		*s = stage{op: op, kind: op.kind, fullW: prev.fullW, fullH: prev.fullH, c: prev.c}
		switch op.kind {
		case opResize:
			nh, nw := resizedSize(prev.fullH, prev.fullW, op.size, op.maxSize)
			if nh <= 0 || nw <= 0 || nh > maxStepSide || nw > maxStepSide {
				return fmt.Errorf("imageprep: resize %v of a %dx%d picture gives %dx%d; send a picture of a less extreme aspect ratio", op.size, prev.fullW, prev.fullH, nw, nh)
			}
			if nh == prev.fullH && nw == prev.fullW {
				s.kind = opSame
			}
			s.fullW, s.fullH = nw, nh
		case opCrop:
			s.top, s.left = cropOrigin(prev.fullH, prev.fullW, op.size[0], op.size[1])
			s.fullW, s.fullH = op.size[1], op.size[0]
		case opGray:
			s.c = op.channels
		}
	}
	last := &st[n-1]
	if last.fullW != pr.w || last.fullH != pr.h || last.c != pr.c {
		return fmt.Errorf("imageprep: the steps made %d channel(s) of %dx%d, the recipe declares %d of %dx%d", last.c, last.fullW, last.fullH, pr.c, pr.w, pr.h)
	}
	// Backward: the window of every picture that later steps read. A resized
	// window is bounded (the pixel limit, or the output's size if larger)
	// before its coefficients are computed or its buffers allocated.
	maxPixels = max(maxPixels, int64(pr.h)*int64(pr.w))
	last.win = rect{0, 0, last.fullW, last.fullH}
	for i := n - 1; i >= 1; i-- {
		s, prev := &st[i], &st[i-1]
		switch s.kind {
		case opSame, opGray:
			prev.win = s.win
		case opCrop:
			prev.win = rect{s.win.x0 + s.left, s.win.y0 + s.top, s.win.w, s.win.h}.clip(prev.fullW, prev.fullH)
		case opResize:
			op := s.op
			prev.win = s.win
			if s.win.empty() {
				break
			}
			if pixelsOver(s.win.w, s.win.h, maxPixels) {
				return fmt.Errorf("imageprep: the steps would compute a %dx%d picture from this %dx%d image, more than %d pixels; send a smaller picture or one of a less extreme aspect ratio", s.win.w, s.win.h, sw, sh, maxPixels)
			}
			if prev.fullW != s.fullW {
				key := tapKey{kernel: op.kernel, filter: op.filter, antialias: op.antialias, in: prev.fullW, out: s.fullW, o0: s.win.x0, n: s.win.w}
				t, err := ws.tapsFor(i, 0, key)
				if err != nil {
					return err
				}
				s.tx = t
				prev.win.x0, prev.win.w = t.lo, t.hi-t.lo
			}
			if prev.fullH != s.fullH {
				key := tapKey{kernel: op.kernel, filter: op.filter, antialias: op.antialias, in: prev.fullH, out: s.fullH, o0: s.win.y0, n: s.win.h}
				t, err := ws.tapsFor(i, 1, key)
				if err != nil {
					return err
				}
				s.ty = t
				prev.win.y0, prev.win.h = t.lo, t.hi-t.lo
			}
		}
	}
	// Buffers, bounded before any is allocated: a resized window and the
	// rows its vertical pass reads may not exceed the pixel limit (or the
	// output's own size, if that is larger).
	for i := range st {
		s := &st[i]
		if s.win.empty() {
			s.win.w, s.win.h = max(s.win.w, 0), max(s.win.h, 0)
		}
		rows := s.win.h
		if s.ty != nil {
			rows = max(rows, s.ty.hi-s.ty.lo)
		}
		if s.kind == opResize && pixelsOver(max(s.win.w, 1), max(rows, 1), maxPixels) {
			return fmt.Errorf("imageprep: the steps would compute a %dx%d picture from this %dx%d image, more than %d pixels; send a smaller picture or one of a less extreme aspect ratio", s.win.w, rows, sw, sh, maxPixels)
		}
		rowLen := s.win.w * s.c
		switch s.kind {
		case opSource, opCrop, opGray:
			ws.bufs[i] = growB(ws.bufs[i], rowLen)
			s.buf = ws.bufs[i]
		}
	}
	ws.cols = grow32(ws.cols, st[0].win.w)
	ws.src = newPILSource(img, pr.gray, st[0].win.x0, st[0].win.w, ws.cols)
	// Forward again: compute the resized windows, in order.
	for i := 1; i < n; i++ {
		if st[i].kind == opResize {
			if err := ws.resize(i); err != nil {
				return err
			}
		}
	}
	// The float conversion: one lookup per value, NCHW.
	hw := pr.h * pr.w
	for y := 0; y < pr.h; y++ {
		row := ws.row(n-1, y)
		for ch := 0; ch < pr.c; ch++ {
			lut := &pr.lut[ch]
			plane := dst[ch*hw+y*pr.w:][:pr.w]
			if pr.c == 1 {
				for x, v := range row[:pr.w] {
					plane[x] = lut[v]
				}
				continue
			}
			for x := range plane {
				plane[x] = lut[row[3*x+ch]]
			}
		}
	}
	return nil
}

// row returns row y (0-based in the window) of stage i's window, win.w*c
// bytes, valid until the next call for that stage.
func (ws *workspace) row(i, y int) []byte {
	s := &ws.stages[i]
	switch s.kind {
	case opSource:
		ws.src.fill(s.win.y0+y, s.buf)
		return s.buf
	case opResize:
		n := s.win.w * s.c
		return s.plane[y*n : (y+1)*n]
	case opSame:
		return ws.row(i-1, y)
	case opGray:
		return ws.gray(i, y)
	}
	// opCrop
	prev := &ws.stages[i-1]
	c := s.c
	py := s.win.y0 + y + s.top // row in the previous picture
	px := s.win.x0 + s.left    // first column there
	if py < prev.win.y0 || py >= prev.win.y0+prev.win.h {
		clear(s.buf)
		return s.buf
	}
	src := ws.row(i-1, py-prev.win.y0)
	if px >= prev.win.x0 && px+s.win.w <= prev.win.x0+prev.win.w {
		off := (px - prev.win.x0) * c
		return src[off : off+s.win.w*c]
	}
	clear(s.buf)
	// The part of the row inside the previous window; the rest is padding.
	from, to := max(px, prev.win.x0), min(px+s.win.w, prev.win.x0+prev.win.w)
	if to > from {
		copy(s.buf[(from-px)*c:], src[(from-prev.win.x0)*c:(to-prev.win.x0)*c])
	}
	return s.buf
}

// gray converts row y of the previous stage: Pillow's convert("L") (PIL
// pictures) or torchvision's rgb_to_grayscale on a uint8 tensor.
func (ws *workspace) gray(i, y int) []byte {
	s := &ws.stages[i]
	src := ws.row(i-1, y)
	inC := ws.stages[i-1].c
	w := s.win.w
	dst := s.buf
	if inC == 1 {
		if s.c == 1 {
			return src
		}
		for x, v := range src[:w] {
			d := dst[3*x : 3*x+3 : 3*x+3]
			d[0], d[1], d[2] = v, v, v
		}
		return dst
	}
	torch := s.op.kernel == kernelTorch
	for x := 0; x < w; x++ {
		p := src[3*x : 3*x+3 : 3*x+3]
		var l uint8
		if torch {
			l = torchGray(p[0], p[1], p[2])
		} else {
			l = gray8(p[0], p[1], p[2])
		}
		if s.c == 1 {
			dst[x] = l
			continue
		}
		d := dst[3*x : 3*x+3 : 3*x+3]
		d[0], d[1], d[2] = l, l, l
	}
	return dst
}

// torchGray is torchvision's uint8 rgb_to_grayscale: r*0.2989 + g*0.587 +
// b*0.114 in float32 (PyTorch's vectorised add with alpha is a fused
// multiply-add), truncated to uint8.
func torchGray(r, g, b uint8) uint8 {
	l := float32(r) * float32(0.2989)
	l = fma32(float32(g), float32(0.587), l)
	l = fma32(float32(b), float32(0.114), l)
	return uint8(l)
}

func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// resize computes stage i's window from stage i-1: the horizontal pass over
// the source rows the window needs, into an 8-bit intermediate picture, then
// the vertical pass (each skipped when that axis keeps its size).
func (ws *workspace) resize(i int) error {
	s := &ws.stages[i]
	prev := &ws.stages[i-1]
	c := s.c
	w, h := s.win.w, s.win.h
	rowLen := w * c
	ws.bufs[i] = growB(ws.bufs[i], rowLen*h)
	s.plane = ws.bufs[i]
	if w == 0 || h == 0 {
		return nil
	}
	// Rows of the previous picture the vertical pass reads.
	y0, rows := s.win.y0, h
	if s.ty != nil {
		y0, rows = s.ty.lo, s.ty.hi-s.ty.lo
	}
	horiz := func(py int, dst []byte) {
		src := ws.row(i-1, py-prev.win.y0)
		if s.tx == nil {
			off := (s.win.x0 - prev.win.x0) * c
			copy(dst, src[off:off+rowLen])
			return
		}
		resampleRow(s.tx, src, prev.win.x0, c, dst)
	}
	if s.ty == nil {
		for y := 0; y < h; y++ {
			horiz(y0+y, s.plane[y*rowLen:(y+1)*rowLen])
		}
		return nil
	}
	ws.temps[i] = growB(ws.temps[i], rowLen*rows)
	temp := ws.temps[i]
	for y := 0; y < rows; y++ {
		horiz(y0+y, temp[y*rowLen:(y+1)*rowLen])
	}
	if cap(ws.acc) < rowLen {
		ws.acc = make([]int32, rowLen)
	}
	for y := 0; y < h; y++ {
		resampleColumn(s.ty, y, temp, y0, rowLen, ws.acc[:rowLen], s.plane[y*rowLen:(y+1)*rowLen])
	}
	return nil
}
