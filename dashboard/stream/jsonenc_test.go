package stream

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// The hand-written encoder must write exactly json.Marshal's bytes: the
// live stream's messages are compared, replayed and spliced as bytes.
func TestEncodeOneIsJSONMarshal(t *testing.T) {
	strs := []string{"", "loss", "train/acc", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\there", "é ü 漢", "\u2028\u2029", "bad\xffutf8", "\x00\x1f\x7f"}
	datas := []string{`{}`, `{"step":3,"values":{"a":1}}`, `{"a": 1}`, "{\n}", `{"h":"<x>"}`, `{"s":"\u2028"}`, `[1,2]`, `not json`, `{"a":`, `"x"`, `null`}
	times := []time.Time{time.Unix(1764400000, 123456789).UTC(), time.Unix(1, 0).In(time.FixedZone("X", 3600)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		ev := Event{Type: strs[r.IntN(len(strs))], RunID: strs[r.IntN(len(strs))], Seq: r.Int64() - r.Int64(),
			Time: times[r.IntN(len(times))], Data: json.RawMessage(datas[r.IntN(len(datas))])}
		ref := ev
		want, err := json.Marshal(ref)
		if err != nil {
			ref.Data = json.RawMessage("{}")
			want, _ = json.Marshal(ref)
		}
		if got := encodeOne(&ev); string(got) != string(want) {
			t.Fatalf("event %+v:\n got %s\nwant %s", ev, got, want)
		}
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendJSONString(%q) = %s, want x%s", s, got, want)
		}
	}
}
