package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"sort"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

// maxImagesPerRequest bounds the files of one multipart request.
const maxImagesPerRequest = 256

// handleImage serves POST /predict/image: one or more images as multipart
// form files (field "file"), or one image as a raw image/* body.
func (s *Server) handleImage(ctx *fasthttp.RequestCtx) {
	mt := mediaType(ctx)
	if mt != "multipart/form-data" && !imageprep.IsContentType(mt) {
		types := imageprep.ContentTypes()
		writeError(ctx, newError(415, CodeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q is not accepted; send multipart/form-data with field \"file\", or a raw body of one of %s", mt, strings.Join(types, ", ")),
			map[string]any{"accepted": append([]string{"multipart/form-data"}, types...)}))
		return
	}
	inst := s.readyToPredict(ctx)
	if inst == nil {
		return
	}
	q := ctx.QueryArgs()
	topK := 5
	if q.Has("top_k") {
		n, err := strconv.Atoi(string(q.Peek("top_k")))
		if err != nil || n < 1 {
			writeError(ctx, newError(400, CodeBadRequest, "top_k must be a positive integer", map[string]any{"parameter": "top_k"}))
			return
		}
		topK = n
	}
	withScores, aerr := boolQuery(q, "scores")
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	raw, aerr := boolQuery(q, "raw")
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	opts, aerr := imageOptions(q)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	body, ok := s.readBody(ctx)
	if !ok {
		return
	}
	var images [][]byte
	if mt == "multipart/form-data" {
		images, aerr = multipartImages(ctx, body)
		if aerr != nil {
			writeError(ctx, aerr)
			return
		}
	} else {
		images = [][]byte{body}
	}
	m := inst.Model
	specs := m.Inputs()
	if len(specs) != 1 {
		writeError(ctx, newError(422, CodeInvalidInput, fmt.Sprintf("this model takes %d inputs; /predict/image serves single-input image models", len(specs)), nil))
		return
	}
	if spec := specs[0]; !m.Batched() && len(spec.Shape) > 0 && spec.Shape[0] > 0 && int64(len(images)) != spec.Shape[0] {
		writeError(ctx, newError(422, CodeInvalidInput,
			fmt.Sprintf("this model has no batch axis: its input %q has shape %s, so it takes exactly %d image(s) per request; this request has %d",
				spec.Name, engine.FormatShape(spec.Shape), spec.Shape[0], len(images)),
			map[string]any{"input": spec.Name, "expected_shape": engine.FormatShape(spec.Shape), "images": len(images)}))
		return
	}
	var recipe engine.ImagePreprocessing
	if m.Meta != nil && m.Meta.Preprocessing != nil && m.Meta.Preprocessing.Image != nil {
		recipe = *m.Meta.Preprocessing.Image
	} else if opts.Height == 0 || opts.Width == 0 || opts.Channels == 0 {
		writeError(ctx, newError(422, CodeInvalidInput, "this model's file has no image preprocessing recipe; pass height, width and channels as query parameters (pixels are then scaled to 0..1), or re-export the model with fw.export and preprocessing=...", nil))
		return
	}
	lim := imageprep.Limits{MaxPixels: s.cfg.MaxImagePixels, MaxBytes: s.cfg.MaxBodyBytes}
	var x engine.Tensor
	var err error
	if inst.Image != nil {
		x, err = inst.Image.Batch(images, opts, lim) // compiled at load, buffers reused
	} else {
		x, err = imageprep.Batch(images, recipe, opts, lim)
	}
	if err != nil {
		writeError(ctx, imageError(err))
		return
	}
	if spec := specs[0]; len(spec.Shape) > 0 && len(spec.Shape) != len(x.Shape) {
		// A flat model input ([N, H*W]) takes the image flattened.
		if n := engine.NumElements(x.Shape[1:]); len(spec.Shape) == 2 && (spec.Shape[1] < 0 || spec.Shape[1] == n) {
			x.Shape = []int64{x.Shape[0], n}
		}
	}
	rctx, cancel := s.requestContext(ctx)
	defer cancel()
	out, rec, err := s.infer(rctx, inst, []engine.Tensor{x}, ctx.Time())
	if err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	if !raw && (len(out) == 0 || out[0].Absent()) {
		s.untrace(rec)
		writeError(ctx, newError(500, CodeEngine, "the model's response left out its first output, which /predict/image ranks; ask for the raw outputs (?raw=true) or fix the model", nil))
		return
	}
	buf := s.getBuf()
	var b []byte
	if raw {
		// The model's outputs as /predict answers them (embeddings, detection
		// heads, or to see exactly what the preprocessing fed the model).
		b = appendPrediction((*buf)[:0], inst, out, nil)
	} else {
		b = appendImagePredictions((*buf)[:0], inst, out[0], topK, withScores)
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(b)
	*buf = b
	s.putBuf(buf)
	s.done(inst, rec)
}

func imageOptions(q *fasthttp.Args) (imageprep.Options, *APIError) {
	var o imageprep.Options
	for _, p := range []struct {
		name string
		dst  *int
	}{{"height", &o.Height}, {"width", &o.Width}, {"channels", &o.Channels}} {
		if !q.Has(p.name) {
			continue
		}
		n, err := strconv.Atoi(string(q.Peek(p.name)))
		if err != nil || n < 1 {
			return o, newError(400, CodeBadRequest, p.name+" must be a positive integer", map[string]any{"parameter": p.name})
		}
		*p.dst = n
	}
	if q.Has("resize") {
		o.Resize = string(q.Peek("resize"))
		if o.Resize == "" { // not "the model's own": a client that sends resize= meant a method
			return o, newError(400, CodeBadRequest, "resize is empty: give bilinear or nearest, or leave the parameter out to use the model's own preprocessing", map[string]any{"parameter": "resize"})
		}
	}
	if q.Has("invert") {
		b, aerr := boolQuery(q, "invert")
		if aerr != nil {
			return o, aerr
		}
		o.Invert = &b
	}
	return o, nil
}

// boolQuery reads ?name=true|1|false|0 (absent: false). Any other value, an
// empty one or a repeated parameter included, is a 400 naming the parameter
// instead of being read as false.
func boolQuery(q *fasthttp.Args, name string) (bool, *APIError) {
	if !q.Has(name) {
		return false, nil
	}
	vals := q.PeekMulti(name)
	v := string(vals[0])
	if len(vals) == 1 {
		switch v {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
	}
	return false, newError(400, CodeBadRequest, fmt.Sprintf("%s=%q: give %s once, as true or false (1 or 0)", name, v, name), map[string]any{"parameter": name})
}

// multipartImages returns the files of a multipart body (field "file"; any
// file part is accepted when none is named "file").
func multipartImages(ctx *fasthttp.RequestCtx, body []byte) ([][]byte, *APIError) {
	_, params, err := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	if err != nil || params["boundary"] == "" {
		return nil, newError(400, CodeBadRequest, "multipart/form-data needs a boundary parameter in Content-Type", nil)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var named, other [][]byte
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, newError(400, CodeBadRequest, "malformed multipart body: "+err.Error(), nil)
		}
		if part.FileName() == "" && part.FormName() != "file" {
			part.Close()
			continue
		}
		data, err := io.ReadAll(part)
		part.Close()
		if err != nil {
			return nil, newError(400, CodeBadRequest, "malformed multipart body: "+err.Error(), nil)
		}
		if part.FormName() == "file" {
			named = append(named, data)
		} else {
			other = append(other, data)
		}
		if len(named)+len(other) > maxImagesPerRequest {
			return nil, newError(413, CodeTooLarge, fmt.Sprintf("more than %d images in one request; split it", maxImagesPerRequest), nil)
		}
	}
	if len(named) == 0 {
		named = other
	}
	if len(named) == 0 {
		return nil, newError(400, CodeBadRequest, `no image in the form: attach it as a file in the field "file" (curl -F file=@digit.png)`, nil)
	}
	return named, nil
}

func imageError(err error) *APIError {
	details := map[string]any{}
	var be *imageprep.BatchError
	if errors.As(err, &be) {
		details["index"] = be.Index
	}
	var tl *imageprep.TooLargeError
	var fe *imageprep.FormatError
	var oe *imageprep.OptionsError
	switch {
	case errors.As(err, &tl):
		if tl.MaxPixels > 0 {
			details["width"], details["height"], details["max_pixels"] = tl.Width, tl.Height, tl.MaxPixels
		}
		return &APIError{Status: 413, Code: CodeTooLarge, Message: err.Error(), Details: details}
	case errors.As(err, &fe):
		details["accepted"] = imageprep.ContentTypes()
		return &APIError{Status: 400, Code: CodeBadImage, Message: err.Error(), Details: details}
	case errors.As(err, &oe):
		details["parameter"] = oe.Field
		return &APIError{Status: 400, Code: CodeBadRequest, Message: err.Error(), Details: details}
	}
	return &APIError{Status: 400, Code: CodeBadImage, Message: err.Error(), Details: details}
}

// appendImagePredictions writes {"predictions": [{"top_k": [...], "scores"?: [...]}], "model": ...}.
// Scores are the output row itself when it already is a probability
// distribution, else its softmax.
func appendImagePredictions(b []byte, inst *serving.Instance, out engine.Tensor, topK int, withScores bool) []byte {
	m := inst.Model
	rows := 1 // a scalar output: one image, one score
	if len(out.Shape) > 0 {
		rows = int(out.Shape[0])
	}
	classes := 1
	if len(out.Shape) >= 2 {
		classes = int(engine.NumElements(out.Shape[1:]))
	}
	labels := m.Labels()
	if topK > classes {
		topK = classes
	}
	scores := make([]float64, classes)
	idx := make([]int, topIndicesBuf(classes, topK))
	b = append(b, `{"predictions":[`...)
	for r := 0; r < rows; r++ {
		if r > 0 {
			b = append(b, ',')
		}
		for i := range scores {
			scores[i] = out.At(r*classes + i)
		}
		probabilities(scores)
		top := topIndices(scores, topK, idx)
		b = append(b, `{"top_k":[`...)
		for k := 0; k < topK; k++ {
			if k > 0 {
				b = append(b, ',')
			}
			i := top[k]
			b = append(b, `{"label":`...)
			if i < len(labels) {
				b = appendJSONString(b, labels[i])
			} else {
				b = appendJSONString(b, strconv.Itoa(i))
			}
			b = append(b, `,"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"score":`...)
			b = appendFloat(b, scores[i])
			b = append(b, '}')
		}
		b = append(b, ']')
		if withScores {
			b = append(b, `,"scores":[`...)
			for i, v := range scores {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendFloat(b, v)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":{"name":`...)
	b = appendJSONString(b, inst.Name())
	b = append(b, `,"version":`...)
	b = appendJSONString(b, inst.Version())
	return append(b, "}}"...)
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', 6, 64)
}

// probabilities turns logits into a softmax in place, leaving a row that
// already is a distribution (non-negative, summing to 1) as it is.
func probabilities(v []float64) {
	sum, nonNeg := 0.0, true
	maxV := math.Inf(-1)
	for _, x := range v {
		sum += x
		if x < 0 || x > 1 {
			nonNeg = false
		}
		if x > maxV {
			maxV = x
		}
	}
	if nonNeg && math.Abs(sum-1) < 1e-3 {
		return
	}
	sum = 0
	for i, x := range v {
		v[i] = math.Exp(x - maxV)
		sum += v[i]
	}
	for i := range v {
		v[i] /= sum
	}
}

// topIndices returns the indices of the k highest scores, highest first,
// equal scores in index order: what a stable sort of every index by
// descending score begins with. buf (topIndicesBuf long) holds the answer.
// A small k is selected in one pass (a 1,000-class model's top 5 took 3 %
// of an image request's CPU as a sort of all 1,000; docs/benchmarks.md).
func topIndices(scores []float64, k int, buf []int) []int {
	if k > maxSelectK {
		for i := range buf {
			buf[i] = i
		}
		sort.SliceStable(buf, func(a, c int) bool { return scores[buf[a]] > scores[buf[c]] })
		return buf[:k]
	}
	top := buf[:0]
	for i, v := range scores {
		if k == 0 || len(top) == k && !(v > scores[top[k-1]]) {
			continue
		}
		j := len(top)
		if j < k {
			top = append(top, 0)
		} else {
			j-- // the last one drops out
		}
		for j > 0 && v > scores[top[j-1]] {
			top[j] = top[j-1]
			j--
		}
		top[j] = i
	}
	return top
}

// maxSelectK is the largest k topIndices selects in one pass; beyond it,
// it sorts every index.
const maxSelectK = 64

// topIndicesBuf is the length of the buffer topIndices needs for the top k
// of n scores: k to select, n to sort.
func topIndicesBuf(n, k int) int {
	if k > maxSelectK {
		return n
	}
	return k
}
