package engine

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Format is the kind of model file, detected from its content.
type Format string

// The model file formats fw serves.
const (
	FormatONNX        Format = "onnx"
	FormatTorchScript Format = "torchscript"
	// FormatQuantized is TorchScript whose fw.json says it is int8 dynamically
	// quantized; it runs on the libtorch backend.
	FormatQuantized Format = "quantized"
	// FormatONNXInt8 is ONNX whose fw.json says it is int8 quantized by
	// onnxruntime.quantization (dynamic or static, export.quantization);
	// it runs on the ONNX Runtime backend.
	FormatONNXInt8 Format = "onnx_int8"
)

// ONNX reports whether files of this format run on the ONNX Runtime backend.
func (f Format) ONNX() bool { return f == FormatONNX || f == FormatONNXInt8 }

// LoadError is why a model file could not be loaded. Code is a stable,
// machine-readable reason; Hint says how to fix it.
type LoadError struct {
	Path string
	Code string
	Msg  string
	Hint string
	Err  error
}

// Load error codes.
const (
	CodeNotFound       = "not_found"
	CodeEmpty          = "empty_file"
	CodeUnknownFormat  = "unknown_format"
	CodePickle         = "pickle_refused"
	CodeTruncated      = "truncated"
	CodeBadMetadata    = "bad_metadata"
	CodeShapeMismatch  = "shape_mismatch"
	CodeBackend        = "backend_unavailable"
	CodeEngine         = "engine_error"
	CodeTestVectorFail = "test_vector_mismatch"
)

func (e *LoadError) Error() string {
	s := fmt.Sprintf("load %s: %s", e.Path, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Hint != "" {
		s += ". Hint: " + e.Hint
	}
	return s
}

func (e *LoadError) Unwrap() error { return e.Err }

const exportHint = "export the model to one file first: fw.export.onnx(model, example, 'model.onnx') or fw.export.torchscript(...) in Python, or `fw export CHECKPOINT --format onnx --out model.onnx`"

// FileInfo is what DetectFile learns from a model file without running it.
type FileInfo struct {
	Format Format
	// Metadata is fw.json for TorchScript files (read from the zip); ONNX
	// metadata is read by the ONNX Runtime backend.
	Metadata *Metadata
	Size     int64
}

// DetectFile identifies a model file by its content (never its extension) and,
// for TorchScript, reads fw.json out of the archive. Pickles are refused
// without being unpickled.
func DetectFile(path string) (*FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		code := CodeEngine
		if errors.Is(err, os.ErrNotExist) {
			code = CodeNotFound
		}
		return nil, &LoadError{Path: path, Code: code, Msg: "cannot open the model file", Err: err,
			Hint: "check the path given to --model (or FW_MODEL)"}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &LoadError{Path: path, Code: CodeEngine, Msg: "cannot stat the model file", Err: err}
	}
	if st.IsDir() {
		return nil, &LoadError{Path: path, Code: CodeUnknownFormat, Msg: "is a directory, not a model file",
			Hint: "pass the exported .onnx or .pt file itself"}
	}
	if st.Size() == 0 {
		return nil, &LoadError{Path: path, Code: CodeEmpty, Msg: "the file is empty", Hint: exportHint}
	}
	head := make([]byte, 16)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	info := &FileInfo{Size: st.Size()}
	switch {
	case bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return detectZip(path, f, st.Size(), info)
	case isPickle(head):
		return nil, &LoadError{Path: path, Code: CodePickle,
			Msg:  "this is a Python pickle (torch.save of a model or state_dict); fw never unpickles files",
			Hint: exportHint}
	}
	if err := checkONNX(f, st.Size()); err != nil {
		return nil, err.withPath(path)
	}
	info.Format = FormatONNX
	return info, nil
}

// isPickle recognises pickle protocol 2+ streams and torch's legacy
// (pre-zip) serialization, which starts with a pickled magic number.
func isPickle(head []byte) bool {
	return len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5
}

func detectZip(path string, f *os.File, size int64, info *FileInfo) (*FileInfo, error) {
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return nil, &LoadError{Path: path, Code: CodeTruncated,
			Msg: "the zip archive is damaged or truncated", Err: err,
			Hint: "copy or export the file again; a partial download or copy looks like this"}
	}
	var hasCode, hasConstants, hasDataPkl bool
	var meta *zip.File
	for _, zf := range zr.File {
		name := zf.Name
		if i := strings.IndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		switch {
		case strings.HasPrefix(name, "code/"):
			hasCode = true
		case name == "constants.pkl":
			hasConstants = true
		case name == "data.pkl":
			hasDataPkl = true
		case name == "extra/"+MetadataKey:
			meta = zf
		}
	}
	if !hasCode && !hasConstants {
		if hasDataPkl {
			return nil, &LoadError{Path: path, Code: CodePickle,
				Msg:  "this is a torch.save checkpoint (a pickled model or state_dict), not an exported model; fw never unpickles files",
				Hint: exportHint}
		}
		return nil, &LoadError{Path: path, Code: CodeUnknownFormat,
			Msg: "a zip archive that is not a TorchScript model", Hint: exportHint}
	}
	info.Format = FormatTorchScript
	if meta != nil {
		if meta.UncompressedSize64 > 64<<20 {
			return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: "fw.json is larger than 64 MiB"}
		}
		rc, err := meta.Open()
		if err != nil {
			return nil, &LoadError{Path: path, Code: CodeTruncated, Msg: "cannot read fw.json from the archive", Err: err}
		}
		doc, err := io.ReadAll(io.LimitReader(rc, 64<<20))
		rc.Close()
		if err != nil {
			return nil, &LoadError{Path: path, Code: CodeTruncated, Msg: "cannot read fw.json from the archive", Err: err}
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			md, err := ParseMetadata(doc)
			if err != nil {
				return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: "the embedded metadata is invalid", Err: err,
					Hint: "re-export with fw.export, which writes valid metadata"}
			}
			info.Metadata = md
			if md.Format == string(FormatQuantized) {
				info.Format = FormatQuantized
			}
		}
	}
	return info, nil
}

type protoError struct {
	code, msg string
}

func (e *protoError) withPath(path string) error {
	hint := exportHint
	if e.code == CodeTruncated {
		hint = "the file ends early: copy or export it again"
	}
	return &LoadError{Path: path, Code: e.code, Msg: e.msg, Hint: hint}
}

// checkONNX walks the top-level fields of a protobuf and accepts it as an ONNX
// ModelProto when every field is well formed, every length stays inside the
// file, and a graph (field 7) is present.
func checkONNX(r io.ReaderAt, size int64) *protoError {
	const unknown = "not a model file fw knows (expected ONNX protobuf or a TorchScript zip archive)"
	var off int64
	var hasGraph, hasIR bool
	buf := make([]byte, binary.MaxVarintLen64)
	readVarint := func() (uint64, bool) {
		n, _ := r.ReadAt(buf, off)
		v, k := binary.Uvarint(buf[:n])
		if k <= 0 {
			return 0, false
		}
		off += int64(k)
		return v, true
	}
	fields := 0
	for off < size {
		tag, ok := readVarint()
		if !ok {
			return &protoError{CodeTruncated, "the ONNX protobuf ends in the middle of a field"}
		}
		field, wire := tag>>3, tag&7
		if field == 0 || field > 1<<16 {
			return &protoError{CodeUnknownFormat, unknown}
		}
		switch wire {
		case 0:
			if _, ok := readVarint(); !ok {
				return &protoError{CodeTruncated, "the ONNX protobuf ends in the middle of a field"}
			}
		case 1:
			off += 8
		case 5:
			off += 4
		case 2:
			l, ok := readVarint()
			if !ok {
				return &protoError{CodeTruncated, "the ONNX protobuf ends in the middle of a field"}
			}
			if l > uint64(size-off) {
				if fields == 0 {
					return &protoError{CodeUnknownFormat, unknown}
				}
				return &protoError{CodeTruncated, fmt.Sprintf("the ONNX protobuf is truncated: field %d needs %d bytes, %d remain", field, l, size-off)}
			}
			off += int64(l)
		default:
			return &protoError{CodeUnknownFormat, unknown}
		}
		if off > size {
			return &protoError{CodeTruncated, "the ONNX protobuf is truncated"}
		}
		if field == 1 && wire == 0 {
			hasIR = true
		}
		if field == 7 && wire == 2 {
			hasGraph = true
		}
		fields++
	}
	if !hasIR && !hasGraph {
		return &protoError{CodeUnknownFormat, unknown}
	}
	if !hasGraph {
		return &protoError{CodeTruncated, "the ONNX model has no graph (the file is cut short or not a model)"}
	}
	return nil
}
