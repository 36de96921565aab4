package onnxdata

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func msg(fields ...[]byte) []byte { return bytes.Join(fields, nil) }

func bytesField(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func varintField(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func entry(k, v string) []byte {
	return bytesField(externalData, msg(bytesField(1, []byte(k)), bytesField(2, []byte(v))))
}

// externalTensor is a TensorProto whose data is in location.
func externalTensor(name, location string, kv ...string) []byte {
	fields := [][]byte{varintField(1, 2), varintField(2, 1), bytesField(8, []byte(name)), entry("location", location)}
	for i := 0; i+1 < len(kv); i += 2 {
		fields = append(fields, entry(kv[i], kv[i+1]))
	}
	return msg(append(fields, varintField(dataLocation, 1))...)
}

// rawTensors finds every TensorProto's name and raw data under a message
// of kind k, and fails on any external data left.
func rawTensors(t *testing.T, b []byte, k kind, out map[string]string) {
	t.Helper()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("malformed output")
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatal("malformed output")
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n : n+m])
			if ck, ok := children[k][num]; ok {
				if ck == tensor {
					var name, raw string
					var location uint64
					for r := v; len(r) > 0; {
						tn, tt, tl := protowire.ConsumeTag(r)
						if tl < 0 {
							break
						}
						tm := protowire.ConsumeFieldValue(tn, tt, r[tl:])
						if tm < 0 {
							break
						}
						if tn == dataLocation && tt == protowire.VarintType {
							location, _ = protowire.ConsumeVarint(r[tl:]) // the last one counts, as protobuf reads it
						}
						if tt == protowire.BytesType {
							tv, _ := protowire.ConsumeBytes(r[tl : tl+tm])
							switch tn {
							case 8:
								name = string(tv)
							case rawData:
								raw = string(tv)
							}
						}
						r = r[tl+tm:]
					}
					if location == 1 {
						t.Fatalf("tensor %q is still external", name)
					}
					out[name] = raw
				} else {
					rawTensors(t, v, ck, out)
				}
			}
		}
		b = b[n+m:]
	}
}

// Every external tensor, wherever it sits (an initializer, a Constant
// node's value in an If's subgraph, a sparse initializer's values, a
// function's node), gets its bytes inline; other fields are kept.
func TestInline(t *testing.T) {
	files := map[string][]byte{"weights.data": []byte("0123456789abcdefghij"), "other.bin": []byte("XYZ")}
	var reads []string
	read := func(loc string, off, n int64) ([]byte, error) {
		reads = append(reads, fmt.Sprintf("%s@%d+%d", loc, off, n))
		f, ok := files[loc]
		if !ok {
			return nil, errors.New("no such file")
		}
		if n < 0 {
			n = int64(len(f)) - off
		}
		if off+n > int64(len(f)) {
			return f[off:], nil
		}
		return f[off : off+n], nil
	}
	constant := msg(bytesField(4, []byte("Constant")), bytesField(5, msg(bytesField(1, []byte("value")), bytesField(5, externalTensor("c", "weights.data", "offset", "10", "length", "4")))))
	thenBranch := msg(bytesField(1, constant), bytesField(2, []byte("then")))
	ifNode := msg(bytesField(4, []byte("If")), bytesField(5, msg(bytesField(1, []byte("then_branch")), bytesField(6, thenBranch))))
	sparse := msg(bytesField(1, externalTensor("sv", "other.bin")), bytesField(2, msg(bytesField(8, []byte("si")), bytesField(rawData, []byte("ii")))))
	g := msg(bytesField(1, ifNode), bytesField(2, []byte("main")),
		bytesField(5, externalTensor("w", "weights.data", "offset", "2", "length", "5")),
		bytesField(5, msg(bytesField(8, []byte("inline")), bytesField(rawData, []byte("kept")))),
		bytesField(15, sparse))
	// A node whose attributes hold tensors (10), graphs (11) and a sparse tensor (22).
	many := msg(bytesField(4, []byte("Custom")), bytesField(5, msg(bytesField(1, []byte("a")),
		bytesField(10, externalTensor("ts", "other.bin", "length", "1")),
		bytesField(11, msg(bytesField(5, externalTensor("gi", "weights.data", "offset", "0", "length", "2")))),
		bytesField(22, msg(bytesField(1, externalTensor("st", "weights.data", "offset", "18")))))))
	g = msg(g, bytesField(1, many))
	// A function's node and its attribute default (attribute_proto, 11).
	fn := msg(bytesField(1, []byte("f")), bytesField(7, constant), bytesField(11, msg(bytesField(5, externalTensor("fa", "other.bin", "offset", "2")))))
	// Training: its initialization graph.
	training := msg(bytesField(1, msg(bytesField(5, externalTensor("ti", "weights.data", "offset", "5", "length", "1")))))
	m := msg(varintField(1, 8), bytesField(2, []byte("producer")), bytesField(7, g), bytesField(20, training), bytesField(25, fn))

	out, n, err := Inline(m, read, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 9 { // the Constant's value twice (the If's branch, the function)
		t.Fatalf("%d tensors inlined, want 9 (reads %v)", n, reads)
	}
	got := map[string]string{}
	rawTensors(t, out, model, got)
	want := map[string]string{"w": "23456", "inline": "kept", "c": "abcd", "sv": "XYZ", "si": "ii",
		"ts": "X", "gi": "01", "st": "ij", "fa": "Z", "ti": "5"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("tensor %s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if !bytes.Contains(out, []byte("producer")) || !bytes.Contains(out, []byte("then")) {
		t.Fatal("other fields were lost")
	}
	// A model without external data comes back as it is.
	plain := msg(bytesField(7, msg(bytesField(5, msg(bytesField(8, []byte("x")), bytesField(rawData, []byte("1")))))))
	if same, n, err := Inline(plain, read, 0); err != nil || n != 0 || !bytes.Equal(same, plain) {
		t.Fatalf("%v %d %v", same, n, err)
	}
}

// Locations outside the model's directory, bad numbers, data shorter than
// it says, a result over the limit and malformed bytes are errors.
func TestInlineRefusals(t *testing.T) {
	read := func(loc string, off, n int64) ([]byte, error) {
		if n < 0 {
			n = 100
		}
		return make([]byte, max(0, min(n, 10))), nil
	}
	wrap := func(tensorBytes []byte) []byte { return bytesField(7, bytesField(5, tensorBytes)) }
	for name, c := range map[string]struct {
		model []byte
		limit int64
		want  string
	}{
		"climbs":      {wrap(externalTensor("a", "../secret")), 0, "not a file beside the model"},
		"absolute":    {wrap(externalTensor("a", "/etc/passwd")), 0, "not a file beside the model"},
		"unclean":     {wrap(externalTensor("a", "x/../../y")), 0, "not a file beside the model"},
		"no_location": {wrap(msg(bytesField(8, []byte("a")), varintField(dataLocation, 1))), 0, "not a file beside the model"},
		"bad_offset":  {wrap(externalTensor("a", "w", "offset", "-1")), 0, "not a byte count"},
		"bad_length":  {wrap(externalTensor("a", "w", "length", "ten")), 0, "not a byte count"},
		"short":       {wrap(externalTensor("a", "w", "length", "50")), 0, "not the 50 it names"},
		"too_large":   {wrap(externalTensor("a", "w", "length", "5")), 10, "larger than the limit"},
		"malformed":   {[]byte{0x3a, 0xff, 0xff, 0xff}, 0, "malformed"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Inline(c.model, read, c.limit)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}

// FuzzInline: no input ends the process, and whatever Inline returns
// carries no external tensor.
func FuzzInline(f *testing.F) {
	f.Add(bytesField(7, bytesField(5, externalTensor("w", "w.data", "offset", "1", "length", "3"))))
	f.Add(bytesField(7, bytesField(1, msg(bytesField(5, msg(bytesField(6, bytesField(5, externalTensor("c", "d")))))))))
	f.Add([]byte{0x3a, 0x02, 0x2a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		read := func(loc string, off, n int64) ([]byte, error) {
			if n < 0 || n > 1<<16 {
				n = 16
			}
			return make([]byte, n), nil
		}
		out, _, err := Inline(b, read, 1<<20)
		if err == nil {
			rawTensors(t, out, model, map[string]string{})
		}
	})
}
