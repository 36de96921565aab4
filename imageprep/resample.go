package imageprep

import (
	"fmt"
	"math"
)

// The resampling of preprocessing.image.steps' resize, on 8-bit pictures, in
// the two implementations a torchvision pipeline runs:
//
//   - kernelPillow: Pillow's Image.resize (libImaging/Resample.c), what
//     Resize does to a PIL image: a separable filter whose support grows with
//     the downscaling factor (antialiasing), coefficients computed in double,
//     normalised per output pixel and rounded to 22-bit fixed point; a
//     horizontal pass into an 8-bit intermediate picture, then a vertical
//     pass, each rounding and clipping to 0..255. NEAREST is Pillow's affine
//     scale (source x = floor((x+0.5)*in/out), accumulated in double).
//   - kernelTorch: PyTorch's uint8 resize (the AVX2 kernels in
//     UpSampleKernel.cpp that torchvision's v2 Resize uses on a uint8 tensor):
//     the same coefficients, rounded to int16 with a precision chosen per axis
//     from the largest coefficient; NEAREST and NEAREST_EXACT are
//     F.interpolate's index rules.
//
// Both are reproduced bit for bit (the tests compare with Pillow and PyTorch
// per pixel). Coefficients are computed once per picture and axis, never per
// pixel, and only for the output pixels a later crop keeps.

type filterKind uint8

const (
	filterNearest filterKind = iota
	filterNearestExact
	filterBilinear
	filterBicubic
	filterBox
	filterHamming
	filterLanczos
)

func parseFilter(s string) (filterKind, bool) {
	switch s {
	case "nearest":
		return filterNearest, true
	case "nearest-exact":
		return filterNearestExact, true
	case "bilinear":
		return filterBilinear, true
	case "bicubic":
		return filterBicubic, true
	case "box":
		return filterBox, true
	case "hamming":
		return filterHamming, true
	case "lanczos":
		return filterLanczos, true
	}
	return 0, false
}

type kernelKind uint8

const (
	kernelPillow kernelKind = iota
	kernelTorch
)

// pillowPrecision is Resample.c's PRECISION_BITS (32 - 8 - 2).
const pillowPrecision = 22

// support is the filter's half-width at scale 1 (Pillow's filter table;
// PyTorch's interp_size/2 for the two it shares).
func (f filterKind) support() float64 {
	switch f {
	case filterBox:
		return 0.5
	case filterBilinear, filterHamming:
		return 1
	case filterBicubic:
		return 2
	case filterLanczos:
		return 3
	}
	return 0
}

// pillowFilter evaluates Pillow's filter functions exactly as Resample.c
// writes them (the same operations in the same order).
func pillowFilter(f filterKind, x float64) float64 {
	switch f {
	case filterBox:
		if x > -0.5 && x <= 0.5 {
			return 1
		}
		return 0
	case filterBilinear:
		if x < 0 {
			x = -x
		}
		if x < 1 {
			return 1 - x
		}
		return 0
	case filterHamming:
		if x < 0 {
			x = -x
		}
		if x == 0 {
			return 1
		}
		if x >= 1 {
			return 0
		}
		x = x * math.Pi
		return math.Sin(x) / x * (float64(float32(0.54)) + float64(float32(0.46))*math.Cos(x))
	case filterBicubic:
		const a = -0.5
		if x < 0 {
			x = -x
		}
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return (((x-5)*x+8)*x - 4) * a
		}
		return 0
	case filterLanczos:
		if -3 <= x && x < 3 {
			return sinc(x) * sinc(x/3)
		}
		return 0
	}
	return 0
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x = x * math.Pi
	return math.Sin(x) / x
}

// torchFilter is PyTorch's aa_filter for linear and cubic (a = -0.5 with
// antialiasing, Keys; -0.75 without, as F.interpolate's bicubic).
func torchFilter(f filterKind, antialias bool, x float64) float64 {
	if f == filterBilinear {
		if x < 0 {
			x = -x
		}
		if x < 1 {
			return 1 - x
		}
		return 0
	}
	a := -0.75
	if antialias {
		a = -0.5
	}
	x = math.Abs(x)
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// axisTaps are the fixed-point coefficients of one axis for the output
// indices o0 .. o0+len(start)-1: output j reads source indices start[j] ..
// start[j]+n[j]-1 with weights k[j*ksize:], and the sum, plus half, is
// shifted right by prec and clipped to 0..255.
type axisTaps struct {
	start, n []int32
	k        []int32
	ksize    int
	prec     uint
	// lo, hi bound the source indices any output reads (hi exclusive).
	lo, hi int
}

// tapKey identifies the taps of one axis, so a workspace reuses them for
// the next picture of the same size.
type tapKey struct {
	kernel         kernelKind
	filter         filterKind
	antialias      bool
	in, out, o0, n int
}

// maxTorchAxis bounds the output length whose coefficients PyTorch's kernel
// computes in full (its precision depends on all of them).
const maxTorchAxis = 1 << 22

// maxTaps bounds the coefficients one axis of one resize keeps (64 MiB).
const maxTaps = 1 << 24

// computeTaps fills t for key (reusing t's slices). An error means a size
// this resampling cannot handle.
func computeTaps(key tapKey, t *axisTaps, scratch *[]float64) error {
	in, out, o0, n := key.in, key.out, key.o0, key.n
	if in <= 0 || out <= 0 || o0 < 0 || n < 0 || o0+n > out {
		return fmt.Errorf("imageprep: resampling %d to %d pixels (window %d+%d) is not possible", in, out, o0, n)
	}
	if n > maxTaps {
		return fmt.Errorf("imageprep: resampling to a %d-pixel window is too much work for one picture", n)
	}
	t.start = grow32(t.start, n)
	t.n = grow32(t.n, n)
	t.lo, t.hi = in, 0
	switch key.filter {
	case filterNearest, filterNearestExact:
		t.ksize, t.prec = 1, pillowPrecision
		t.k = grow32(t.k, n)
		a0 := float64(in) / float64(out)
		xo := a0 * 0.5 // Pillow's ImagingScaleAffine: a position accumulated in double
		for d := 0; d < o0+n; d++ {
			if d >= o0 {
				i := int(xo)
				if key.kernel == kernelTorch {
					i = torchNearest(key, d)
				}
				j := d - o0
				if i < 0 || i >= in { // Pillow leaves such pixels black
					t.start[j], t.n[j], t.k[j] = 0, 0, 0
				} else {
					t.start[j], t.n[j], t.k[j] = int32(i), 1, 1<<pillowPrecision
					t.lo, t.hi = min(t.lo, i), max(t.hi, i+1)
				}
			}
			xo += a0
		}
		if t.lo > t.hi {
			t.lo, t.hi = 0, 0
		}
		return nil
	}
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1.0)
	aa := key.kernel == kernelPillow || key.antialias
	support := key.filter.support()
	if aa {
		support *= filterscale
	}
	ksize := int(math.Ceil(support))*2 + 1
	if !aa {
		ksize = int(2 * support) // PyTorch's interp_size: 2 (linear) or 4 (cubic)
	}
	// Bounded before anything is allocated or computed: the coefficients kept
	// (per output pixel of the window) and, for PyTorch's kernel, the ones
	// computed over the whole axis.
	if ksize > 1<<16 || int64(n)*int64(ksize) > maxTaps || (key.kernel == kernelTorch && int64(out)*int64(ksize) > 4*maxTaps) {
		return fmt.Errorf("imageprep: resampling %d to %d pixels needs a %d-tap filter per pixel; that is too much work for one picture", in, out, ksize)
	}
	ss := 1.0
	if aa {
		ss = 1.0 / filterscale
	}
	t.ksize = ksize
	t.k = grow32(t.k, n*ksize)
	w := growF(scratch, ksize)
	// weights computes output xx's coefficients into w: it returns the
	// first source index, the count, and the largest value PyTorch's
	// precision rule looks at.
	weights := func(xx int) (int, int, float64) {
		if !aa {
			return torchWeightsNoAA(key.filter, in, scale, xx, w)
		}
		center := (float64(xx) + 0.5) * scale
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > in {
			xmax = in
		}
		xmax -= xmin
		xmax = min(max(xmax, 0), ksize) // PyTorch clamps; Pillow's buffer has ksize slots
		total := 0.0
		for x := 0; x < xmax; x++ {
			var v float64
			if key.kernel == kernelPillow {
				v = pillowFilter(key.filter, (float64(x+xmin)-center+0.5)*ss)
			} else {
				v = torchFilter(key.filter, true, (float64(x+xmin)-center+0.5)*ss)
			}
			w[x] = v
			total += v
		}
		wmax := 0.0
		if total != 0 {
			for x := 0; x < xmax; x++ {
				w[x] /= total
				wmax = max(wmax, w[x])
			}
		}
		return xmin, xmax, wmax
	}
	prec := uint(pillowPrecision)
	if key.kernel == kernelTorch {
		// The precision depends on the largest coefficient of the whole axis.
		if out > maxTorchAxis {
			return fmt.Errorf("imageprep: resampling to %d pixels is more than %d", out, maxTorchAxis)
		}
		wmax := 0.0
		for xx := 0; xx < out; xx++ {
			_, _, m := weights(xx)
			wmax = max(wmax, m)
		}
		for prec = 0; prec < 22; prec++ {
			if int(0.5+wmax*float64(int(1)<<(prec+1))) >= 1<<15 {
				break
			}
		}
	}
	t.prec = prec
	one := float64(int(1) << prec)
	for j := 0; j < n; j++ {
		xmin, cnt, _ := weights(o0 + j)
		t.start[j], t.n[j] = int32(xmin), int32(cnt)
		if cnt > 0 {
			t.lo, t.hi = min(t.lo, xmin), max(t.hi, xmin+cnt)
		}
		k := t.k[j*ksize : (j+1)*ksize]
		for x := range k {
			v := 0.0
			if x < cnt {
				v = w[x]
			}
			if key.kernel == kernelTorch {
				v *= one
				if v < 0 {
					k[x] = int32(int16(int32(-0.5 + v)))
				} else {
					k[x] = int32(int16(int32(0.5 + v)))
				}
				continue
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*one)
			} else {
				k[x] = int32(0.5 + v*one)
			}
		}
	}
	if t.lo > t.hi {
		t.lo, t.hi = 0, 0
	}
	return nil
}

// torchWeightsNoAA is PyTorch's _compute_indices_min_size_weights: the
// coefficients of F.interpolate's bilinear (clamped source position) or
// bicubic (a = -0.75, taps beyond the edges folded onto the edge pixels) for
// output xx, without normalisation. It returns the first source index, the
// count and the largest partial sum (PyTorch's wt_max).
func torchWeightsNoAA(f filterKind, in int, scale float64, xx int, w []float64) (int, int, float64) {
	interp := len(w)
	cubic := interp > 2
	real := scale*(float64(xx)+0.5) - 0.5
	if !cubic && real < 0 {
		real = 0
	}
	// guard_index_and_lambda: floorf, so the position is rounded to float32 first.
	idx := min(int(math.Floor(float64(float32(real)))), in-1)
	lambda := min(max(real-float64(idx), 0), 1)
	support := interp / 2
	ubMin, ubMax := idx-support+1, idx+support+1
	xmin := max(ubMin, 0)
	size := min(ubMax, in) - xmin
	size = min(max(size, 0), interp)
	wmax := 0.0
	wi := 0
	for j := 0; j < interp; j++ {
		w[j] = 0
		v := torchFilter(f, false, float64(j+1-support)-lambda)
		if ubMin+j <= 0 {
			wi = 0
		} else if ubMin+j >= in-1 {
			wi = size - 1
		}
		if wi >= 0 && wi < interp {
			w[wi] += v
			wmax = max(wmax, w[wi])
		}
		wi++
	}
	return xmin, size, wmax
}

// torchNearest is F.interpolate's source index of output d: nearest
// (floor(d*scale), scale = in/out in float32) or nearest-exact
// (floor((d+0.5)*scale)).
func torchNearest(key tapKey, d int) int {
	in, out := key.in, key.out
	scale := float32(in) / float32(out)
	if key.filter == filterNearestExact {
		v := float32((float64(d) + 0.5) * float64(scale))
		return min(int(math.Floor(float64(v))), in-1)
	}
	switch {
	case out == in:
		return d
	case out == 2*in:
		return d >> 1
	}
	v := float32(d) * scale
	return min(int(math.Floor(float64(v))), in-1)
}

func grow32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growF(s *[]float64, n int) []float64 {
	if cap(*s) < n {
		*s = make([]float64, n)
	}
	return (*s)[:n]
}

func growB(s []byte, n int) []byte {
	if cap(s) < n {
		return make([]byte, n)
	}
	return s[:n]
}

// clip8 is the shift-and-clip both kernels end each output value with.
func clip8(ss int32, prec uint) byte {
	v := ss >> prec
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// resampleRow filters one row horizontally: src holds the row's pixels from
// source column x0 on (c channels each), dst gets len(t.start) pixels.
func resampleRow(t *axisTaps, src []byte, x0, c int, dst []byte) {
	half := int32(1) << (t.prec - 1)
	ks := t.ksize
	switch c {
	case 3:
		for j := range t.start {
			s := (int(t.start[j]) - x0) * 3
			cnt := int(t.n[j])
			k := t.k[j*ks : j*ks+cnt]
			p := src[s : s+3*cnt]
			s0, s1, s2 := half, half, half
			for x, w := range k {
				q := p[3*x : 3*x+3 : 3*x+3]
				s0 += int32(q[0]) * w
				s1 += int32(q[1]) * w
				s2 += int32(q[2]) * w
			}
			d := dst[3*j : 3*j+3 : 3*j+3]
			d[0], d[1], d[2] = clip8(s0, t.prec), clip8(s1, t.prec), clip8(s2, t.prec)
		}
	default:
		for j := range t.start {
			s := int(t.start[j]) - x0
			cnt := int(t.n[j])
			k := t.k[j*ks : j*ks+cnt]
			p := src[s : s+cnt]
			s0 := half
			for x, w := range k {
				s0 += int32(p[x]) * w
			}
			dst[j] = clip8(s0, t.prec)
		}
	}
}

// resampleColumn computes output row j of the vertical pass: rows holds the
// horizontally filtered rows from source row y0 on, each stride bytes, and
// dst gets one row of len(dst) values (acc is scratch of the same length).
func resampleColumn(t *axisTaps, j int, rows []byte, y0, stride int, acc []int32, dst []byte) {
	half := int32(1) << (t.prec - 1)
	ks := t.ksize
	s := int(t.start[j]) - y0
	cnt := int(t.n[j])
	k := t.k[j*ks : j*ks+cnt]
	acc = acc[:len(dst)]
	for i := range acc {
		acc[i] = half
	}
	for x, w := range k {
		row := rows[(s+x)*stride:][:len(acc)]
		for i, v := range row {
			acc[i] += int32(v) * w
		}
	}
	for i, v := range acc {
		dst[i] = clip8(v, t.prec)
	}
}
