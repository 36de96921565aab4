package modelrepo

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]byte(`name: "m" platform: "onnxruntime_onnx" max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] format: FORMAT_NCHW } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { all { } }
parameters { key: "k" value: { string_value: "v" } }`), false)
	if err != nil || cfg.GetMaxBatchSize() != 8 || cfg.GetInstanceGroup()[0].GetCount() != 2 || cfg.GetVersionPolicy().GetAll() == nil {
		t.Fatalf("%v %v", cfg, err)
	}
	// A backend's state buffer hints are taken (Triton's L0_implicit_state sets them).
	hints, err := parseConfig([]byte(`sequence_batching { state [ { input_name: "I" output_name: "O" use_same_buffer_for_input_output: true use_growable_memory: true } ] }`), false)
	if err != nil || !hints.GetSequenceBatching().GetState()[0].GetUseGrowableMemory() {
		t.Fatalf("state hints: %v %v", hints, err)
	}
	for text, want := range map[string]string{
		`sequence_batching { oldest { preserve_ordering: true } }`:  "sequence_batching.oldest.preserve_ordering",
		`ensemble_scheduling { step [ { model_namespace: "x" } ] }`: "ensemble_scheduling.step.model_namespace",
		`input [ { name: "x" is_shape_tensor: true } ]`:             "input.is_shape_tensor",
		`optimization { priority: PRIORITY_MAX }`:                   "optimization",
		`instance_group [ { count: 1 rate_limiter { } } ]`:          "instance_group.rate_limiter",
		`model_operations { op_library_filename: "x" }`:             "model_operations",
		`max_batch_size: "x"`:                                       "does not parse",
		`nonsense_field: 1`:                                         "nonsense_field",
		`{"max_batch_size": 4}`:                                     "does not parse",
		strings.Repeat("#", maxConfigBytes+1):                       "limit",
	} {
		if _, err := parseConfig([]byte(text), false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60q: %v, want %q", text, err, want)
		}
	}
	if _, err := parseConfig([]byte(`{"max_batch_size": 4, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]}`), true); err != nil {
		t.Fatal(err)
	}
	if _, err := parseConfig([]byte(`{"model_warmup": [{"name": "w"}]}`), true); err == nil || !strings.Contains(err.Error(), "model_warmup") {
		t.Fatalf("JSON override with an unsupported field: %v", err)
	}
}

// FuzzParseConfig: no configuration text panics the parser or the checks
// that follow it.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`name: "simple" max_batch_size: 8 input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]`), false)
	f.Add([]byte(`{"max_batch_size": 16, "version_policy": {"specific": {"versions": [1, 2]}}}`), true)
	f.Add([]byte(`dynamic_batching { preferred_batch_size: [ -1 ] } instance_group [ { count: -5 kind: KIND_MODEL } ]`), false)
	f.Add([]byte(`dynamic_batching { priority_levels: 18446744073709551615 default_priority_level: 4294967295
priority_queue_policy { key: 4294967296 value: { default_timeout_microseconds: 18446744073709551615 max_queue_size: 10 } } }`), false)
	f.Add([]byte(`max_batch_size: 2 sequence_batching { oldest { max_candidate_sequences: 3 preferred_batch_size: [ 2 ] }
control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
state [ { input_name: "a" output_name: "b" data_type: TYPE_FP32 dims: [ -1 ] initial_state { data_type: TYPE_FP32 dims: [ 2 ] data_file: "../x" } } ] }`), false)
	f.Add([]byte(`platform: "ensemble" max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4, -1 ] reshape { shape: [ -1, 4 ] } } ]
output [ { name: "B" data_type: TYPE_FP32 dims: [ 16 ] label_filename: "l.txt" } ]
ensemble_scheduling { step [ { model_name: "m1" model_version: -1 input_map { key: "x" value: "A" } output_map { key: "y" value: "B" } } ] }`), false)
	f.Fuzz(func(t *testing.T, data []byte, json bool) {
		cfg, err := parseConfig(data, json)
		if err != nil {
			return
		}
		if checkPlatform(cfg) == nil && isEnsemble(cfg) {
			_ = ensembleConfig("m", cfg)
			_, _ = describeEnsemble("m", cfg, map[string]string{"l.txt": "a\nb\n"})
		}
		_, _ = versionsToLoad(t.TempDir(), cfg)
		_, _ = modelFile(t.TempDir(), cfg)
		_, _ = sequenceConfig("m", t.TempDir(), cfg)
		if db := cfg.GetDynamicBatching(); db != nil && checkQueues(db, "m") == nil {
			_ = queueSizes(queues(db))
		}
	})
}

func TestQueuePolicyMaxQueueSize(t *testing.T) {
	cfg, err := parseConfig([]byte(`max_batch_size: 8 dynamic_batching { default_queue_policy { max_queue_size: 1 } }`), false)
	if err != nil || cfg.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize() != 1 {
		t.Fatalf("%v %v", cfg, err)
	}
	cfg, err = parseConfig([]byte(`max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 1
default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100 allow_timeout_override: true }
priority_queue_policy { key: 2 value: { max_queue_size: 3 } } }`), false)
	if err != nil || cfg.GetDynamicBatching().GetPriorityQueuePolicy()[2].GetMaxQueueSize() != 3 {
		t.Fatalf("priority levels and queue policies: %v %v", cfg, err)
	}
}
