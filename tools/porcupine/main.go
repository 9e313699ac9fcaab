// Command porcupine checks synod operation histories for linearizability with Porcupine's
// checker and a key-value model partitioned per key, or, for histories with kind "op"
// operations (the rich workload: lists, INCR, APPEND, multi-key operations, scans,
// MULTI/EXEC), the rich model of rich.go partitioned by connected key groups. It is the
// independent oracle for the Rust checker in crates/sim: both must agree on every history of
// the corpus and on the rich histories the simulator writes.
//
// Usage: porcupine [-v] FILE...   (the format is docs/history-format.md)
//
// Exit status: 0 when every history is linearizable, 1 when at least one is not, 2 on bad
// input (unreadable file, malformed JSON, unknown operation kind).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// history is one JSON history file.
type history struct {
	Format string `json:"format"`
	Ops    []op   `json:"ops"`
}

// op is one operation of a history. Nullable strings are pointers: nil means "absent key"
// (get/cas) or "delete" (cas new).
type op struct {
	Client uint64  `json:"client"`
	Kind   string  `json:"kind"`
	Key    string  `json:"key"`
	Value  *string `json:"value"`
	Expect *string `json:"expect"`
	Call   int64   `json:"call"`
	Return *int64  `json:"return"`
	Output *output `json:"output"`
	// kind "op": the synod_core::Op (serde JSON); see rich.go.
	Op json.RawMessage `json:"op"`
}

type output struct {
	Value   *string `json:"value"`
	Existed bool    `json:"existed"`
	Ok      bool    `json:"ok"`
	Current *string `json:"current"`
	// Rejected for good: the operation never takes effect (left out of the check).
	Rejected bool `json:"rejected"`
	// kind "op": the synod_core::OpResult (serde JSON).
	Result json.RawMessage `json:"result"`
}

// kvInput / kvOutput are what the Porcupine model sees. `known` is false for an
// indeterminate operation (no reply): any output is accepted, and its effect may or may
// not have happened (its return time is +infinity, so it can be linearized last).
type kvInput struct {
	kind   string
	key    string
	value  *string
	expect *string
}

type kvOutput struct {
	known bool
	out   output
}

// state of one key: present + value.
type kvState struct {
	present bool
	value   string
}

func opt(s kvState) *string {
	if !s.present {
		return nil
	}
	v := s.value
	return &v
}

func fromOpt(p *string) kvState {
	if p == nil {
		return kvState{}
	}
	return kvState{present: true, value: *p}
}

func eqOpt(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, o := range h {
			k := o.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		var parts [][]porcupine.Operation
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return kvState{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s := st.(kvState)
		i := in.(kvInput)
		o := out.(kvOutput)
		switch i.kind {
		case "get":
			return !o.known || eqOpt(o.out.Value, opt(s)), s
		case "put":
			return true, fromOpt(i.value)
		case "delete":
			return !o.known || o.out.Existed == s.present, kvState{}
		case "cas":
			swapped := eqOpt(i.expect, opt(s))
			next := s
			if swapped {
				next = fromOpt(i.value)
			}
			if !o.known {
				return true, next
			}
			return o.out.Ok == swapped && eqOpt(o.out.Current, opt(s)), next
		}
		return false, s
	},
	Equal: func(a, b interface{}) bool { return a.(kvState) == b.(kvState) },
	DescribeOperation: func(in, out interface{}) string {
		i := in.(kvInput)
		return fmt.Sprintf("%s(%q) %+v", i.kind, i.key, out.(kvOutput))
	},
}

// load reads a history: the classic per-key model's operations, or (when the history has
// kind "op" operations) the rich model's (rich.go), with the model to check them against.
func load(path string) ([]porcupine.Operation, porcupine.Model, error) {
	ops, rich, err := loadAny(path)
	if err != nil {
		return nil, porcupine.Model{}, err
	}
	if rich {
		m := richModel
		m.Partition = partitionRich
		return ops, m.ToModel(), nil
	}
	return ops, kvModel, nil
}

func loadAny(path string) ([]porcupine.Operation, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	var h history
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, false, fmt.Errorf("%s: malformed history JSON: %v", path, err)
	}
	if h.Format != "synod-history-v1" {
		return nil, false, fmt.Errorf("%s: unknown format %q (want synod-history-v1)", path, h.Format)
	}
	if hasRich(h.Ops) {
		ops, err := loadRich(path, h.Ops)
		return ops, true, err
	}
	reduce(h.Ops)
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	for n, o := range h.Ops {
		switch o.Kind {
		case "get", "put", "delete", "cas":
		default:
			return nil, false, fmt.Errorf("%s: op %d: unknown kind %q", path, n, o.Kind)
		}
		if o.Kind == "put" && o.Value == nil {
			return nil, false, fmt.Errorf("%s: op %d: put without a value", path, n)
		}
		ret := int64(math.MaxInt64)
		out := kvOutput{}
		if o.Return == nil && o.Kind == "get" {
			// An indeterminate get changes nothing and may return anything.
			continue
		}
		if o.Return != nil {
			if o.Output == nil {
				return nil, false, fmt.Errorf("%s: op %d: returned operation without output", path, n)
			}
			if *o.Return < o.Call {
				return nil, false, fmt.Errorf("%s: op %d: returns before its call", path, n)
			}
			ret = *o.Return
			out = kvOutput{known: true, out: *o.Output}
			if o.Output.Rejected {
				// Must never take effect: the rest of the history is checked without it.
				continue
			}
		}
		ops = append(ops, porcupine.Operation{
			ClientId: n,
			Input:    kvInput{kind: o.Kind, key: o.Key, value: o.Value, expect: o.Expect},
			Call:     o.Call,
			Output:   out,
			Return:   ret,
		})
	}
	return ops, false, nil
}

// unseen stands for every value no operation observes (see reduce).
const unseen = "\x00unseen"

// reduce replaces each value that no operation observes (no get returns it, no cas expects
// or reports it) by one placeholder. The model then gives the same verdict at every step
// (no comparison can tell those values apart), so linearizability is unchanged, while
// Porcupine's cache of (linearized set, state) sees one state where it saw one per value:
// with many indeterminate writes nobody reads (an overloaded IDEM) that is what keeps the
// search small.
func reduce(ops []op) {
	seen := map[string]bool{}
	note := func(p *string) {
		if p != nil {
			seen[*p] = true
		}
	}
	for _, o := range ops {
		if o.Kind == "cas" {
			note(o.Expect)
		}
		if o.Output != nil {
			note(o.Output.Value)
			note(o.Output.Current)
		}
	}
	if seen[unseen] {
		return // a history that uses the placeholder itself: leave it as it is
	}
	for i := range ops {
		if (ops[i].Kind == "put" || ops[i].Kind == "cas") && ops[i].Value != nil && !seen[*ops[i].Value] {
			u := unseen
			ops[i].Value = &u
		}
	}
}

func main() {
	verbose := flag.Bool("v", false, "print one line per history")
	timeout := flag.Duration("timeout", 60*time.Second, "give up on one history after this long (exit 2)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: porcupine [-v] [-timeout D] HISTORY.json...")
		os.Exit(2)
	}
	bad := 0
	for _, path := range flag.Args() {
		ops, model, err := load(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		res := porcupine.CheckOperationsTimeout(model, ops, *timeout)
		switch res {
		case porcupine.Ok:
			if *verbose {
				fmt.Printf("%s: linearizable (%d ops)\n", path, len(ops))
			}
		case porcupine.Illegal:
			bad++
			fmt.Printf("%s: NOT linearizable (%d ops)\n", path, len(ops))
		default:
			fmt.Fprintf(os.Stderr, "%s: check timed out after %v\n", path, *timeout)
			os.Exit(2)
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}
