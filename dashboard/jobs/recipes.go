package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Param is one entry of a recipe's parameter schema.
type Param struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"` // int, float, str or bool
	Default     any      `json:"default"`
	Min         *float64 `json:"min,omitempty"`
	Max         *float64 `json:"max,omitempty"`
	Choices     []any    `json:"choices,omitempty"`
	Description string   `json:"description"`
}

// Recipe is a registered training entry point: a Python module run as
// `python -m MODULE --run-id ID --experiment E --params JSON [--resume-from CKPT]`.
type Recipe struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Module      string  `json:"module"`
	Builtin     bool    `json:"builtin"`
	Params      []Param `json:"params"`
}

// LoadRecipes runs `PYTHON -m fw.recipes --list [--file FILE]` and decodes
// the registry it prints (built-in recipes plus those of the TOML file).
func LoadRecipes(ctx context.Context, python, file string) ([]Recipe, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	args := []string{"-m", "fw.recipes", "--list"}
	if file != "" {
		args = append(args, "--file", file)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s -m fw.recipes --list: %v: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	var out struct {
		Recipes []Recipe `json:"recipes"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("decoding the recipe registry: %w", err)
	}
	return out.Recipes, nil
}

// Validate checks params against the recipe's schema (unknown names, types,
// ranges, choices) and returns them with defaults filled in. Problems are
// returned as one message per parameter.
func (r Recipe) Validate(params map[string]any) (map[string]any, []string) {
	var problems []string
	known := map[string]bool{}
	out := map[string]any{}
	for _, p := range r.Params {
		known[p.Name] = true
		v, ok := params[p.Name]
		if !ok {
			out[p.Name] = p.Default
			continue
		}
		cv, err := p.check(v)
		if err != "" {
			problems = append(problems, fmt.Sprintf("%s: %s", p.Name, err))
			continue
		}
		out[p.Name] = cv
	}
	var unknown []string
	for k := range params {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		problems = append(problems, fmt.Sprintf("%s: unknown parameter of recipe %s", k, r.Name))
	}
	return out, problems
}

func (p Param) check(v any) (any, string) {
	var num float64
	switch p.Type {
	case "bool":
		if _, ok := v.(bool); !ok {
			return nil, fmt.Sprintf("expected true or false, got %v", jsonText(v))
		}
	case "int":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, fmt.Sprintf("expected an integer, got %v", jsonText(v))
		}
		num, v = f, int64(f)
	case "float":
		f, ok := v.(float64)
		if !ok {
			return nil, fmt.Sprintf("expected a number, got %v", jsonText(v))
		}
		num = f
	case "str":
		if _, ok := v.(string); !ok {
			return nil, fmt.Sprintf("expected a string, got %v", jsonText(v))
		}
	default:
		return nil, fmt.Sprintf("the schema has an unknown type %q", p.Type)
	}
	if p.Min != nil && num < *p.Min {
		return nil, fmt.Sprintf("%v is below the minimum %v", jsonText(v), *p.Min)
	}
	if p.Max != nil && num > *p.Max {
		return nil, fmt.Sprintf("%v is above the maximum %v", jsonText(v), *p.Max)
	}
	if len(p.Choices) > 0 {
		for _, c := range p.Choices {
			if jsonText(c) == jsonText(v) {
				return v, ""
			}
		}
		return nil, fmt.Sprintf("%v is not one of %s", jsonText(v), jsonText(p.Choices))
	}
	return v, ""
}

func jsonText(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		v = int64(f)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
