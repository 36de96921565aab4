package store

import (
	"strconv"
)

// decodeEventFast decodes the shape fw.track sends for every metrics and
// system event ({"type", "run_id", "writer", "seq", "time", "step",
// "values": {key: number}}) without reflection: encoding/json was a sixth
// of the dashboard's CPU at ingest. It accepts only a strict subset of JSON
// and of the Event fields (exact lower-case names, each at most once,
// printable ASCII strings without escapes, numbers, null where
// encoding/json leaves a field as it is) and reports false for anything
// else, which json.Unmarshal then decodes with its own errors. Where it
// reports true, ev is what json.Unmarshal would make of data
// (FuzzDecodeEventFast checks this).
func decodeEventFast(data []byte, ev *Event) bool {
	d := fastDec{b: data}
	d.ws()
	if !d.eat('{') {
		return false
	}
	var seen uint8
	d.ws()
	if d.eat('}') {
		return d.end()
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		var bit uint8
		switch key {
		case "type", "run_id", "writer":
			s, ok := d.str()
			if !ok {
				return false
			}
			switch key {
			case "type":
				bit, ev.Type = 1, s
			case "run_id":
				bit, ev.RunID = 2, s
			default:
				bit, ev.Writer = 4, s
			}
		case "seq":
			n, ok := d.integer()
			if !ok {
				return false
			}
			bit, ev.Seq = 8, n
		case "time":
			bit = 16
			if !d.null() {
				num, ok := d.number()
				if !ok || ev.Time.UnmarshalJSON(num) != nil {
					return false
				}
			}
		case "step":
			bit = 32
			if d.null() {
				ev.Step = nil
			} else {
				n, ok := d.integer()
				if !ok {
					return false
				}
				ev.Step = &n
			}
		case "values":
			bit = 64
			if !d.values(ev) {
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		d.ws()
		if d.eat('}') {
			return d.end()
		}
		if !d.eat(',') {
			return false
		}
	}
}

// fastDec scans the subset of JSON decodeEventFast accepts.
type fastDec struct {
	b []byte
	i int
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDec) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end: only white space after the object.
func (d *fastDec) end() bool {
	d.ws()
	return d.i == len(d.b)
}

func (d *fastDec) null() bool {
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// key: an object member's name and the colon after it, with the white
// space around them.
func (d *fastDec) key() (string, bool) {
	d.ws()
	k, ok := d.str()
	if !ok {
		return "", false
	}
	d.ws()
	if !d.eat(':') {
		return "", false
	}
	d.ws()
	return k, true
}

// str: a string of printable ASCII without escapes.
func (d *fastDec) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// number: a JSON number's bytes, by the grammar.
func (d *fastDec) number() ([]byte, bool) {
	start := d.i
	d.eat('-')
	switch {
	case d.eat('0'):
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.digits()
	default:
		return nil, false
	}
	if d.eat('.') {
		if !d.digits() {
			return nil, false
		}
	}
	if d.eat('e') || d.eat('E') {
		if !d.eat('+') {
			d.eat('-')
		}
		if !d.digits() {
			return nil, false
		}
	}
	return d.b[start:d.i], true
}

func (d *fastDec) digits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// integer: a number without fraction or exponent that fits an int64, as
// encoding/json takes one into an int64.
func (d *fastDec) integer() (int64, bool) {
	num, ok := d.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	return n, err == nil
}

// values: an object of numbers into ev.Values (a new map, as
// json.Unmarshal makes for a nil one), each as Float.UnmarshalJSON reads it.
func (d *fastDec) values(ev *Event) bool {
	if ev.Values != nil || !d.eat('{') {
		return false // a map already there would be merged into: not this path's
	}
	m := make(map[string]Float, 16)
	d.ws()
	if !d.eat('}') {
		for {
			k, ok := d.key()
			if !ok {
				return false
			}
			num, ok := d.number()
			if !ok {
				return false
			}
			v, err := strconv.ParseFloat(string(num), 64)
			if err != nil {
				return false
			}
			m[k] = Float(v)
			d.ws()
			if d.eat('}') {
				break
			}
			if !d.eat(',') {
				return false
			}
		}
	}
	ev.Values = m
	return true
}
