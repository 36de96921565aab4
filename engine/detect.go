package engine

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	// FormatAOTI is an AOTInductor package (.pt2: torch.export + Inductor's
	// compiled C++ in a zip archive); it runs on the libtorch backend through
	// torch::inductor::AOTIModelPackageLoader.
	FormatAOTI Format = "aoti"
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
	// CodeTorchVersion: an AOTInductor package compiled by another torch
	// release than the libtorch fw runs it with.
	CodeTorchVersion = "torch_version_mismatch"
	// CodeUnsupportedDType: an input or output whose element type the
	// model's engine cannot take.
	CodeUnsupportedDType = "unsupported_dtype"
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

const exportHint = "export the model to one file first: fw.export.onnx(model, example, 'model.onnx'), fw.export.torchscript(...) or fw.export.aoti(...) in Python, or `fw export CHECKPOINT --format onnx --out model.onnx`"

// FileInfo is what DetectFile learns from a model file without running it.
type FileInfo struct {
	Format Format
	// Metadata is fw.json for TorchScript files and AOTInductor packages
	// (read from the zip); ONNX metadata is read by the ONNX Runtime backend.
	Metadata *Metadata
	Size     int64
	// Package is an AOTInductor package's own metadata (what the loader's
	// get_metadata() returns: AOTI_DEVICE_KEY, AOTI_CPU_ISA... and fw.json),
	// without fw.json; nil for other formats.
	Package map[string]string
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
	var hasCode, hasConstants, hasDataPkl, hasAOTI, hasAOTILib, isPT2 bool
	var meta *zip.File
	var aotiMeta, aotiFiles []*zip.File
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
		case name == "archive_format":
			isPT2 = true
		case strings.HasPrefix(name, aotiModelDir):
			hasAOTI = true
			aotiFiles = append(aotiFiles, zf)
			if strings.HasSuffix(name, ".so") {
				hasAOTILib = true
			}
			if strings.HasSuffix(name, "_metadata.json") {
				aotiMeta = append(aotiMeta, zf)
			}
		case strings.HasPrefix(name, "data/aotinductor/"):
			hasAOTI = true
		case strings.HasPrefix(name, "data/constants/"):
			aotiFiles = append(aotiFiles, zf)
		}
	}
	if !hasCode && !hasConstants && hasAOTI {
		return detectAOTI(path, info, hasAOTILib, aotiMeta, aotiFiles)
	}
	if !hasCode && !hasConstants {
		if isPT2 {
			return nil, &LoadError{Path: path, Code: CodeUnknownFormat,
				Msg:  "a .pt2 archive without AOTInductor code (a torch.export program saved with torch.export.save): fw serves compiled AOTInductor packages",
				Hint: "compile it: fw.export.aoti(model, example, 'model.pt2') in Python, or torch._inductor.aoti_compile_and_package(exported_program)"}
		}
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
		doc, err := readZipEntry(path, meta, "fw.json")
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			md, err := parseEmbedded(path, doc)
			if err != nil {
				return nil, err
			}
			info.Metadata = md
			if md.Format == string(FormatQuantized) {
				info.Format = FormatQuantized
			}
		}
	}
	return info, nil
}

// maxMetadataBytes bounds fw.json and an AOTInductor package's metadata file.
const maxMetadataBytes = 64 << 20

// aotiModelDir is where an AOTInductor package keeps the model fw loads (the
// loader's default model name, "model"), below the archive's top folder.
const aotiModelDir = "data/aotinductor/model/"

func readZipEntry(path string, zf *zip.File, what string) ([]byte, error) {
	if zf.UncompressedSize64 > maxMetadataBytes {
		return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: what + " is larger than 64 MiB"}
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, &LoadError{Path: path, Code: CodeTruncated, Msg: "cannot read " + what + " from the archive", Err: err}
	}
	defer rc.Close()
	doc, err := io.ReadAll(io.LimitReader(rc, maxMetadataBytes))
	if err != nil {
		return nil, &LoadError{Path: path, Code: CodeTruncated, Msg: "cannot read " + what + " from the archive", Err: err,
			Hint: "copy or export the file again; a damaged or partial copy looks like this"}
	}
	return doc, nil
}

func parseEmbedded(path string, doc []byte) (*Metadata, error) {
	md, err := ParseMetadata(doc)
	if err != nil {
		return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: "the embedded metadata is invalid", Err: err,
			Hint: "re-export with fw.export, which writes valid metadata"}
	}
	return md, nil
}

// detectAOTI accepts an AOTInductor package that holds a compiled library for
// its model, whose files the loader extracts (model and constants) are intact,
// and reads the package metadata (every copy the package holds must agree: the
// loader reads one of them) and fw.json inside it.
func detectAOTI(path string, info *FileInfo, hasLib bool, metaFiles, files []*zip.File) (*FileInfo, error) {
	if !hasLib {
		return nil, &LoadError{Path: path, Code: CodeUnknownFormat,
			Msg:  "an AOTInductor package without a compiled library for model \"model\" (" + aotiModelDir + "*.so): libtorch would compile its C++ sources with a command line taken from the file, which fw refuses",
			Hint: "export a compiled package: fw.export.aoti(model, example, 'model.pt2')"}
	}
	if len(metaFiles) == 0 {
		return nil, &LoadError{Path: path, Code: CodeBadMetadata,
			Msg: "the AOTInductor package has no metadata file (" + aotiModelDir + "*_metadata.json)", Hint: "export it again"}
	}
	// The loader extracts these files and dlopens the library without checking
	// their CRC-32: a damaged library could crash the process. Reading each
	// entry to its end makes archive/zip check it.
	for _, zf := range files {
		rc, err := zf.Open()
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			return nil, &LoadError{Path: path, Code: CodeTruncated, Msg: "the AOTInductor package is damaged: " + zf.Name, Err: err,
				Hint: "copy or export the file again; a damaged or partial copy looks like this"}
		}
	}
	var pkg map[string]string
	for _, zf := range metaFiles {
		doc, err := readZipEntry(path, zf, "the package metadata")
		if err != nil {
			return nil, err
		}
		var m map[string]string
		if err := json.Unmarshal(doc, &m); err != nil {
			return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: "the AOTInductor package metadata is not a JSON object of strings", Err: err,
				Hint: "export it again"}
		}
		if pkg != nil && !maps.Equal(pkg, m) {
			return nil, &LoadError{Path: path, Code: CodeBadMetadata,
				Msg: "the AOTInductor package's metadata files disagree (the package was altered)", Hint: "export it again"}
		}
		pkg = m
	}
	info.Format = FormatAOTI
	if doc, ok := pkg[MetadataKey]; ok {
		md, err := parseEmbedded(path, []byte(doc))
		if err != nil {
			return nil, err
		}
		if md.Format != string(FormatAOTI) {
			return nil, &LoadError{Path: path, Code: CodeBadMetadata,
				Msg: fmt.Sprintf("fw.json says format %q inside an AOTInductor package", md.Format), Hint: "export it again with fw.export.aoti"}
		}
		info.Metadata = md
		delete(pkg, MetadataKey)
	}
	info.Package = pkg
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
	const unknown = "not a model file fw knows (expected an ONNX protobuf, a TorchScript zip archive or an AOTInductor package)"
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
