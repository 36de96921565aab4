// Package onnxdata makes an ONNX model whose tensors are stored in
// external data files (onnx.save_model(..., save_as_external_data=True),
// which MLflow's ONNX flavor does by default) into one self-contained
// model file, the form fw's registry and fw serve keep a version in. It
// rewrites the protobuf wire format directly (no generated ONNX types):
// every tensor that says its data is external gets that data inline, in
// the model's graphs, their nodes' attributes and subgraphs, sparse
// tensors, functions and training graphs; nothing else changes.
package onnxdata

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxModelBytes bounds the model Inline writes: protobuf's 2 GiB less
// headroom (ONNX itself refuses a ModelProto over 2 GiB).
const MaxModelBytes = 2<<30 - 1<<20

// ErrTooLarge is a model whose tensors together are larger than the limit
// Inline was given.
var ErrTooLarge = errors.New("onnxdata: the model with its external data is larger than the limit")

// ReadFunc returns the bytes [offset, offset+length) of the external data
// file location (a path relative to the model's directory, checked by
// Inline); length -1 means to the end of the file.
type ReadFunc func(location string, offset, length int64) ([]byte, error)

// message kinds whose fields Inline walks.
type kind int

const (
	model kind = iota
	graph
	node
	attribute
	tensor
	sparseTensor
	function
	trainingInfo
)

// children are, for each message kind, its fields that hold messages
// which may contain tensors (onnx.proto's field numbers).
var children = map[kind]map[protowire.Number]kind{
	model:        {7: graph, 20: trainingInfo, 25: function},
	graph:        {1: node, 5: tensor, 15: sparseTensor},
	node:         {5: attribute},
	attribute:    {5: tensor, 6: graph, 10: tensor, 11: graph, 22: sparseTensor, 23: sparseTensor},
	sparseTensor: {1: tensor, 2: tensor},
	function:     {7: node, 11: attribute},
	trainingInfo: {1: graph, 2: graph},
}

// TensorProto's fields.
const (
	rawData      protowire.Number = 9
	externalData protowire.Number = 13
	dataLocation protowire.Number = 14
)

// Inline returns model (a serialized ModelProto) with the data of every
// external tensor read through read and stored in the tensor itself, and
// how many tensors it inlined (0: model is returned as it is). A location
// that is absolute or climbs out of the model's directory, an offset or
// length that is not a number, or a result above limit bytes (at most
// MaxModelBytes) is an error naming the tensor.
func Inline(modelBytes []byte, read ReadFunc, limit int64) ([]byte, int, error) {
	if limit <= 0 || limit > MaxModelBytes {
		limit = MaxModelBytes
	}
	w := &walker{read: read, limit: limit, size: int64(len(modelBytes))}
	out, changed, err := w.message(modelBytes, model, 0)
	if err != nil {
		return nil, 0, err
	}
	if !changed {
		return modelBytes, 0, nil
	}
	return out, w.inlined, nil
}

type walker struct {
	read    ReadFunc
	limit   int64
	size    int64 // the output's size so far, estimated from the input
	inlined int
}

// maxDepth bounds nested graphs (If/Loop bodies) a model may have.
const maxDepth = 64

// message rewrites one message of kind k; changed reports whether any
// tensor inside it was inlined (else b is returned unchanged).
func (w *walker) message(b []byte, k kind, depth int) ([]byte, bool, error) {
	if depth > maxDepth {
		return nil, false, errors.New("onnxdata: graphs nested more than 64 deep")
	}
	if k == tensor {
		return w.tensor(b)
	}
	sub := children[k]
	var out []byte
	changed := false
	err := fields(b, "model", func(f field) error {
		ck, isChild := sub[f.num]
		if !isChild || f.typ != protowire.BytesType {
			out = append(out, f.raw...)
			return nil
		}
		nv, ch, err := w.message(f.bytes(), ck, depth+1)
		if err != nil {
			return err
		}
		if !ch {
			out = append(out, f.raw...)
			return nil
		}
		changed = true
		out = protowire.AppendTag(out, f.num, protowire.BytesType)
		out = protowire.AppendBytes(out, nv)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return b, false, nil
	}
	return out, true, nil
}

// tensor inlines one TensorProto's external data.
func (w *walker) tensor(b []byte) ([]byte, bool, error) {
	var name, location string
	offset, length := int64(0), int64(-1)
	external := false
	var keep []byte
	err := fields(b, "tensor", func(f field) error {
		switch {
		case f.num == 8 && f.typ == protowire.BytesType:
			name = string(f.bytes())
			keep = append(keep, f.raw...)
		case f.num == dataLocation && f.typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(f.val)
			external = v == 1
		case f.num == externalData && f.typ == protowire.BytesType:
			key, value, err := stringEntry(f.bytes())
			if err != nil {
				return err
			}
			switch key {
			case "location":
				location = value
			case "offset", "length":
				x, err := strconv.ParseInt(value, 10, 64)
				if err != nil || x < 0 {
					return fmt.Errorf("onnxdata: tensor %q: external data %s %q is not a byte count", name, key, value)
				}
				if key == "offset" {
					offset = x
				} else {
					length = x
				}
			}
		default:
			keep = append(keep, f.raw...)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if !external {
		return b, false, nil
	}
	if location == "" || path.IsAbs(location) || strings.Contains(location, "\\") || path.Clean(location) != location || strings.HasPrefix(location, "../") || location == ".." {
		return nil, false, fmt.Errorf("onnxdata: tensor %q: external data location %q is not a file beside the model", name, location)
	}
	if length >= 0 && w.size+length > w.limit {
		return nil, false, fmt.Errorf("%w (%d bytes) at tensor %q", ErrTooLarge, w.limit, name)
	}
	data, err := w.read(location, offset, length)
	if err != nil {
		return nil, false, fmt.Errorf("onnxdata: tensor %q: reading %s: %w", name, location, err)
	}
	if length >= 0 && int64(len(data)) != length {
		return nil, false, fmt.Errorf("onnxdata: tensor %q: %s holds %d bytes at offset %d, not the %d it names", name, location, len(data), offset, length)
	}
	w.size += int64(len(data))
	if w.size > w.limit {
		return nil, false, fmt.Errorf("%w (%d bytes) at tensor %q", ErrTooLarge, w.limit, name)
	}
	keep = protowire.AppendTag(keep, rawData, protowire.BytesType)
	keep = protowire.AppendBytes(keep, data)
	w.inlined++
	return keep, true, nil
}

// stringEntry reads a StringStringEntryProto (key 1, value 2).
func stringEntry(b []byte) (key, value string, err error) {
	err = fields(b, "external data entry", func(f field) error {
		if f.typ == protowire.BytesType {
			switch f.num {
			case 1:
				key = string(f.bytes())
			case 2:
				value = string(f.bytes())
			}
		}
		return nil
	})
	return key, value, err
}

// field is one field of a message as it is on the wire: raw is its tag
// and value, val the value alone.
type field struct {
	num      protowire.Number
	typ      protowire.Type
	raw, val []byte
}

// bytes is a length-delimited field's content.
func (f field) bytes() []byte {
	v, _ := protowire.ConsumeBytes(f.val)
	return v
}

// fields calls fn with each field of the message b, in order; malformed
// bytes are an error naming what b is.
func fields(b []byte, what string, fn func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("onnxdata: malformed %s: %w", what, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("onnxdata: malformed %s: %w", what, protowire.ParseError(m))
		}
		if err := fn(field{num: num, typ: typ, raw: b[:n+m], val: b[n : n+m]}); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
