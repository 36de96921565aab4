package tracking

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
)

// StreamEvent maps a stored event to its stream event; ok is false for
// types the stream does not carry (param, tag, checkpoint, artifact).
func StreamEvent(ev *store.Event) (stream.Event, bool) {
	out := stream.Event{RunID: ev.RunID, Seq: ev.Seq, Time: ev.Time.Time}
	var data any
	switch ev.Type {
	case store.EventMetrics:
		out.Type = stream.TypeMetric
		out.Data = appendStepValues(nil, ev.Step, ev.Values)
		return out, true
	case store.EventMetric:
		out.Type = stream.TypeMetric
		vals := map[string]store.Float{}
		if ev.Value != nil {
			vals[ev.Key] = *ev.Value
		}
		data = map[string]any{"step": ev.Step, "values": vals}
	case store.EventSystem:
		out.Type = stream.TypeSystem
		out.Data = appendStepValues(nil, ev.Step, ev.Values)
		return out, true
	case store.EventLog:
		out.Type = stream.TypeLog
		stream := ev.Stream
		if stream == "" {
			stream = "stdout"
		}
		data = map[string]any{"stream": stream, "lines": ev.Lines}
	case store.EventProgress:
		out.Type = stream.TypeProgress
		data = map[string]any{"step": ev.Step, "total_steps": ev.TotalSteps, "epoch": ev.Epoch, "total_epochs": ev.TotalEpochs}
	case store.EventRunStart, store.EventRunResume, store.EventStatus, store.EventRunEnd:
		out.Type = stream.TypeStatus
		st := ev.Status
		switch {
		case st == "" && ev.Type == store.EventRunEnd:
			st = store.StatusFinished
		case st == "":
			st = store.StatusRunning
		}
		d := map[string]any{"event": ev.Type, "status": st}
		if ev.Type == store.EventRunStart {
			d["experiment"], d["name"] = ev.Experiment, ev.Name
		}
		if ev.Error != "" {
			d["error"] = ev.Error
		}
		if ev.ExitCode != nil {
			d["exit_code"] = *ev.ExitCode
		}
		data = d
	default:
		return stream.Event{}, false
	}
	b, err := json.Marshal(data)
	if err != nil {
		return stream.Event{}, false
	}
	out.Data = b
	return out, true
}

// appendStepValues appends what json.Marshal writes for
// map[string]any{"step": step, "values": values} (keys sorted, each value
// as store.Float writes it), without reflection: it runs for every stored
// metrics event.
func appendStepValues(dst []byte, step *int64, values map[string]store.Float) []byte {
	dst = append(dst, `{"step":`...)
	if step == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, *step, 10)
	}
	dst = append(dst, `,"values":`...)
	if values == nil {
		return append(dst, "null}"...)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = stream.AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = values[k].AppendJSON(dst)
	}
	return append(dst, "}}"...)
}
