// The rich model: histories with kind "op" operations (`synod check --workload rich`, the
// nemesis test's INCR / list / multi-key clients). Porcupine's models are arbitrary Go state
// machines, so the rich operations are expressed as a second, independent implementation of
// the sequential semantics of synod_core::kv::KvStore for the operation kinds the workloads
// issue: strings (GET, SET, DEL, CAS, INCRBY, APPEND, STRLEN, MGET, MSET, multi-key DEL,
// EXISTS, SCAN over a range), lists (LPUSH/RPUSH, LPOP/RPOP with and without a count,
// LRANGE, LLEN, LINDEX, LMOVE) and MULTI/EXEC. What it does not check, and why:
//
//   - Versions (the WATCH versions) and the WATCH condition of a MULTI: versions are the
//     stamps of the commands that wrote the keys, which only the Rust checker models. A
//     Versions read is accepted with any answer; a watched MULTI is checked as "aborted, and
//     nothing changed" when it answered Multi(null) and as "ran every operation, with these
//     results" when it answered a list; an indeterminate one may have done either (a
//     nondeterministic step).
//   - Error texts: an operation the model says fails (WRONGTYPE, not an integer) must have
//     answered an error, any error.
//   - Any other operation kind (hashes, sets, sorted sets, expiry, key scans, DBSIZE, ...):
//     refused as bad input (exit 2), never skipped.
//
// The history is split like the Rust checker splits it: operations are connected when they
// share a key (a scan touches every key of the history in its range), and each connected
// group is checked on its own.

package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// bs is a byte string as serde writes `Bytes`: an array of numbers (or null).
type bs []byte

func (b *bs) UnmarshalJSON(data []byte) error {
	var nums []int
	if err := json.Unmarshal(data, &nums); err != nil {
		return fmt.Errorf("byte string: %v", err)
	}
	out := make([]byte, len(nums))
	for i, n := range nums {
		if n < 0 || n > 255 {
			return fmt.Errorf("byte string: %d is not a byte", n)
		}
		out[i] = byte(n)
	}
	*b = out
	return nil
}

// richOp is one parsed synod_core::Op of the supported kinds.
type richOp struct {
	kind      string
	key, key2 string // key2: ListMove's destination
	value     *string
	expect    *string // Cas
	by        int64
	keys      []string
	pairs     [][2]string
	left      bool
	toLeft    bool
	values    []string // ListPush
	count     *uint64
	onlyExist bool
	start     int64
	stop      int64
	index     int64
	rstart    string // Scan
	rend      string
	limit     uint32
	ops       []richOp // Multi
	watched   bool
}

func strp(b *bs) *string {
	if b == nil {
		return nil
	}
	s := string(*b)
	return &s
}

// parseOp reads a synod_core::Op in serde's JSON (externally tagged).
func parseOp(raw json.RawMessage) (richOp, error) {
	var tagged map[string]json.RawMessage
	if err := json.Unmarshal(raw, &tagged); err != nil || len(tagged) != 1 {
		var unit string
		if json.Unmarshal(raw, &unit) == nil {
			return richOp{}, fmt.Errorf("operation %q is not supported by the Porcupine model", unit)
		}
		return richOp{}, fmt.Errorf("malformed op %s", string(raw))
	}
	for kind, body := range tagged {
		var f struct {
			Key          bs                `json:"key"`
			Value        *bs               `json:"value"`
			Expect       *bs               `json:"expect"`
			New          *bs               `json:"new"`
			By           int64             `json:"by"`
			Keys         []bs              `json:"keys"`
			Pairs        [][2]bs           `json:"pairs"`
			Values       []bs              `json:"values"`
			Left         bool              `json:"left"`
			OnlyExisting bool              `json:"only_existing"`
			Count        *uint64           `json:"count"`
			End          bs                `json:"end"`
			Stop         int64             `json:"stop"`
			Index        int64             `json:"index"`
			Limit        uint32            `json:"limit"`
			From         bs                `json:"from"`
			To           bs                `json:"to"`
			FromLeft     bool              `json:"from_left"`
			ToLeft       bool              `json:"to_left"`
			Ops          []json.RawMessage `json:"ops"`
			Watch        []json.RawMessage `json:"watch"`
		}
		// Scan's `start` is a byte string, ListRange's an integer: read it separately.
		var generic map[string]json.RawMessage
		if err := json.Unmarshal(body, &generic); err != nil {
			return richOp{}, fmt.Errorf("op %s: %v", kind, err)
		}
		startRaw := generic["start"]
		delete(generic, "start")
		stripped, _ := json.Marshal(generic)
		if err := json.Unmarshal(stripped, &f); err != nil {
			return richOp{}, fmt.Errorf("op %s: %v", kind, err)
		}
		o := richOp{kind: kind, key: string(f.Key), value: strp(f.Value), by: f.By, left: f.Left, count: f.Count,
			onlyExist: f.OnlyExisting, stop: f.Stop, index: f.Index, limit: f.Limit}
		for _, k := range f.Keys {
			o.keys = append(o.keys, string(k))
		}
		switch kind {
		case "Get", "Put", "Delete", "IncrBy", "Append", "Strlen", "ListLen", "ListIndex", "MultiGet",
			"MultiDelete", "Exists", "Versions":
			if (kind == "Put" || kind == "Append") && o.value == nil {
				return richOp{}, fmt.Errorf("op %s without a value", kind)
			}
		case "Cas":
			o.expect, o.value = strp(f.Expect), strp(f.New)
		case "MultiPut":
			for _, p := range f.Pairs {
				o.pairs = append(o.pairs, [2]string{string(p[0]), string(p[1])})
			}
		case "ListPush":
			if len(f.Values) == 0 {
				return richOp{}, fmt.Errorf("ListPush without values")
			}
			for _, v := range f.Values {
				o.values = append(o.values, string(v))
			}
		case "ListPop":
		case "ListRange":
			if err := json.Unmarshal(startRaw, &o.start); err != nil {
				return richOp{}, fmt.Errorf("ListRange start: %v", err)
			}
		case "ListMove":
			o.key, o.key2, o.left, o.toLeft = string(f.From), string(f.To), f.FromLeft, f.ToLeft
		case "Scan":
			var start bs
			if err := json.Unmarshal(startRaw, &start); err != nil {
				return richOp{}, fmt.Errorf("Scan start: %v", err)
			}
			o.rstart, o.rend = string(start), string(f.End)
		case "Multi":
			o.watched = len(f.Watch) > 0
			for _, r := range f.Ops {
				sub, err := parseOp(r)
				if err != nil {
					return richOp{}, fmt.Errorf("in Multi: %v", err)
				}
				o.ops = append(o.ops, sub)
			}
		default:
			return richOp{}, fmt.Errorf("operation %q is not supported by the Porcupine model", kind)
		}
		return o, nil
	}
	panic("unreachable")
}

// footprint: the keys the operation names (a scan: none; its range is resolved later).
func (o richOp) footprint() []string {
	switch o.kind {
	case "MultiGet", "MultiDelete", "Exists", "Versions":
		return o.keys
	case "MultiPut":
		var ks []string
		for _, p := range o.pairs {
			ks = append(ks, p[0])
		}
		return ks
	case "ListMove":
		return []string{o.key, o.key2}
	case "Scan":
		return nil
	case "Multi":
		var ks []string
		for _, s := range o.ops {
			ks = append(ks, s.footprint()...)
		}
		return ks
	}
	return []string{o.key}
}

func (o richOp) scans() [][2]string {
	if o.kind == "Scan" {
		return [][2]string{{o.rstart, o.rend}}
	}
	var out [][2]string
	for _, s := range o.ops {
		out = append(out, s.scans()...)
	}
	return out
}

func inRange(k string, r [2]string) bool {
	return k >= r[0] && (r[1] == "" || k < r[1])
}

// value of one key.
type val struct {
	list bool
	s    string
	l    []string
}

// richState: the keys of one group. Never modified in place: steps copy.
type richState map[string]val

func (s richState) clone() richState {
	c := make(richState, len(s))
	for k, v := range s {
		c[k] = v
	}
	return c
}

// A result is kept as canonical JSON (serde's form of synod_core::OpResult), except an
// error, which is "error" whatever its text.
type richIn struct {
	op richOp
}

type richOut struct {
	known bool
	// canonical JSON of the recorded OpResult ("error" for any Error)
	result string
}

func canon(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var x interface{}
	if err := json.Unmarshal(b, &x); err != nil {
		panic(err)
	}
	b, _ = json.Marshal(x)
	return string(b)
}

func canonRaw(raw json.RawMessage) (string, error) {
	var x interface{}
	if err := json.Unmarshal(raw, &x); err != nil {
		return "", err
	}
	if m, ok := x.(map[string]interface{}); ok {
		if _, isErr := m["Error"]; isErr && len(m) == 1 {
			return "error", nil
		}
	}
	b, _ := json.Marshal(x)
	return string(b), nil
}

func bytesOf(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

func optBytes(p *string) interface{} {
	if p == nil {
		return nil
	}
	return bytesOf(*p)
}

var errResult = struct{}{}

// apply runs one operation on a copy of the state; the result in serde's JSON shape, or
// errResult. `run` = false for a watched MULTI that aborted.
func apply(s richState, o richOp) (richState, interface{}) {
	str := func(k string) (*string, bool) {
		v, ok := s[k]
		if !ok {
			return nil, true
		}
		if v.list {
			return nil, false
		}
		x := v.s
		return &x, true
	}
	lst := func(k string) ([]string, bool, bool) { // list, present, type ok
		v, ok := s[k]
		if !ok {
			return nil, false, true
		}
		if !v.list {
			return nil, true, false
		}
		return v.l, true, true
	}
	putList := func(ns richState, k string, l []string) {
		if len(l) == 0 {
			delete(ns, k)
		} else {
			ns[k] = val{list: true, l: l}
		}
	}
	switch o.kind {
	case "Get":
		v, ok := str(o.key)
		if !ok {
			return s, errResult
		}
		return s, map[string]interface{}{"Value": optBytes(v)}
	case "Put":
		ns := s.clone()
		ns[o.key] = val{s: *o.value}
		return ns, "Done"
	case "Delete":
		_, existed := s[o.key]
		ns := s.clone()
		delete(ns, o.key)
		return ns, map[string]interface{}{"Deleted": existed}
	case "Cas":
		cur, ok := str(o.key)
		if !ok {
			return s, errResult
		}
		if !eqOpt(cur, o.expect) {
			return s, map[string]interface{}{"Cas": map[string]interface{}{"ok": false, "current": optBytes(cur)}}
		}
		ns := s.clone()
		if o.value == nil {
			delete(ns, o.key)
		} else {
			ns[o.key] = val{s: *o.value}
		}
		return ns, map[string]interface{}{"Cas": map[string]interface{}{"ok": true, "current": optBytes(cur)}}
	case "IncrBy":
		cur, ok := str(o.key)
		if !ok {
			return s, errResult
		}
		var n int64
		if cur != nil {
			parsed, err := strconv.ParseInt(*cur, 10, 64)
			if err != nil {
				return s, errResult
			}
			n = parsed
		}
		next := n + o.by
		if (o.by > 0 && next < n) || (o.by < 0 && next > n) {
			return s, errResult
		}
		ns := s.clone()
		ns[o.key] = val{s: fmt.Sprint(next)}
		return ns, map[string]interface{}{"Int": next}
	case "Append":
		cur, ok := str(o.key)
		if !ok {
			return s, errResult
		}
		v := *o.value
		if cur != nil {
			v = *cur + v
		}
		ns := s.clone()
		ns[o.key] = val{s: v}
		return ns, map[string]interface{}{"Int": len(v)}
	case "Strlen":
		cur, ok := str(o.key)
		if !ok {
			return s, errResult
		}
		n := 0
		if cur != nil {
			n = len(*cur)
		}
		return s, map[string]interface{}{"Int": n}
	case "MultiGet":
		vs := []interface{}{}
		for _, k := range o.keys {
			v, ok := s[k]
			if ok && !v.list {
				vs = append(vs, bytesOf(v.s))
			} else {
				vs = append(vs, nil)
			}
		}
		return s, map[string]interface{}{"Values": vs}
	case "MultiPut":
		ns := s.clone()
		for _, p := range o.pairs {
			ns[p[0]] = val{s: p[1]}
		}
		return ns, "Done"
	case "MultiDelete":
		ns := s.clone()
		n := 0
		for _, k := range o.keys {
			if _, ok := ns[k]; ok {
				n++
				delete(ns, k)
			}
		}
		return ns, map[string]interface{}{"Int": n}
	case "Exists":
		n := 0
		for _, k := range o.keys {
			if _, ok := s[k]; ok {
				n++
			}
		}
		return s, map[string]interface{}{"Int": n}
	case "Scan":
		var keys []string
		for k, v := range s {
			if !v.list && inRange(k, [2]string{o.rstart, o.rend}) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		if o.rend != "" && o.rend <= o.rstart {
			keys = nil
		}
		if o.limit > 0 && len(keys) > int(o.limit) {
			keys = keys[:o.limit]
		}
		pairs := []interface{}{}
		for _, k := range keys {
			pairs = append(pairs, []interface{}{bytesOf(k), bytesOf(s[k].s)})
		}
		return s, map[string]interface{}{"Scan": pairs}
	case "ListPush":
		l, present, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		if !present && o.onlyExist {
			return s, map[string]interface{}{"Int": 0}
		}
		nl := append([]string(nil), l...)
		for _, v := range o.values {
			if o.left {
				nl = append([]string{v}, nl...)
			} else {
				nl = append(nl, v)
			}
		}
		ns := s.clone()
		putList(ns, o.key, nl)
		return ns, map[string]interface{}{"Int": len(nl)}
	case "ListPop":
		l, present, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		if !present {
			if o.count != nil {
				return s, map[string]interface{}{"Items": nil}
			}
			return s, map[string]interface{}{"Value": nil}
		}
		n := 1
		if o.count != nil {
			n = int(*o.count)
		}
		if n > len(l) {
			n = len(l)
		}
		nl := append([]string(nil), l...)
		popped := []interface{}{}
		for i := 0; i < n; i++ {
			if o.left {
				popped = append(popped, bytesOf(nl[0]))
				nl = nl[1:]
			} else {
				popped = append(popped, bytesOf(nl[len(nl)-1]))
				nl = nl[:len(nl)-1]
			}
		}
		ns := s
		if n > 0 {
			ns = s.clone()
			putList(ns, o.key, nl)
		}
		if o.count == nil {
			if len(popped) == 0 {
				return ns, map[string]interface{}{"Value": nil}
			}
			return ns, map[string]interface{}{"Value": popped[0]}
		}
		return ns, map[string]interface{}{"Items": popped}
	case "ListRange":
		l, _, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		items := []interface{}{}
		n := int64(len(l))
		st, en := o.start, o.stop
		if st < 0 {
			st += n
		}
		if en < 0 {
			en += n
		}
		if st < 0 {
			st = 0
		}
		if en >= n {
			en = n - 1
		}
		for i := st; i <= en && i < n; i++ {
			items = append(items, bytesOf(l[i]))
		}
		return s, map[string]interface{}{"Items": items}
	case "ListLen":
		l, _, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		return s, map[string]interface{}{"Int": len(l)}
	case "ListIndex":
		l, _, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		i := o.index
		if i < 0 {
			i += int64(len(l))
		}
		if i < 0 || i >= int64(len(l)) {
			return s, map[string]interface{}{"Value": nil}
		}
		return s, map[string]interface{}{"Value": bytesOf(l[i])}
	case "ListMove":
		src, present, ok := lst(o.key)
		if !ok {
			return s, errResult
		}
		if !present {
			return s, map[string]interface{}{"Value": nil}
		}
		dst, _, ok := lst(o.key2)
		if !ok {
			return s, errResult
		}
		ns := s.clone()
		nsrc := append([]string(nil), src...)
		var v string
		if o.left {
			v, nsrc = nsrc[0], nsrc[1:]
		} else {
			v, nsrc = nsrc[len(nsrc)-1], nsrc[:len(nsrc)-1]
		}
		if o.key == o.key2 {
			if o.toLeft {
				nsrc = append([]string{v}, nsrc...)
			} else {
				nsrc = append(nsrc, v)
			}
			putList(ns, o.key, nsrc)
			return ns, map[string]interface{}{"Value": bytesOf(v)}
		}
		ndst := append([]string(nil), dst...)
		if o.toLeft {
			ndst = append([]string{v}, ndst...)
		} else {
			ndst = append(ndst, v)
		}
		putList(ns, o.key, nsrc)
		putList(ns, o.key2, ndst)
		return ns, map[string]interface{}{"Value": bytesOf(v)}
	case "Multi":
		results := []interface{}{}
		cur := s
		for _, sub := range o.ops {
			next, r := apply(cur, sub)
			cur = next
			if r == errResult {
				results = append(results, map[string]interface{}{"Error": ""})
			} else {
				results = append(results, r)
			}
		}
		return cur, map[string]interface{}{"Multi": results}
	}
	panic("unsupported kind " + o.kind)
}

// result canonicalizes a predicted result like a recorded one.
func result(r interface{}) string {
	if r == errResult {
		return "error"
	}
	c := canon(r)
	return normalizeErrors(c)
}

// normalizeErrors: inside a Multi, an error is compared as an error whatever its text.
func normalizeErrors(c string) string {
	var x interface{}
	if json.Unmarshal([]byte(c), &x) != nil {
		return c
	}
	var walk func(v interface{}) interface{}
	walk = func(v interface{}) interface{} {
		switch t := v.(type) {
		case map[string]interface{}:
			if _, ok := t["Error"]; ok && len(t) == 1 {
				return map[string]interface{}{"Error": ""}
			}
			for k, e := range t {
				t[k] = walk(e)
			}
		case []interface{}:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return v
	}
	b, _ := json.Marshal(walk(x))
	return string(b)
}

var richModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{richState{}} },
	Step: func(st, in, out interface{}) []interface{} {
		s := st.(richState)
		o := in.(richIn).op
		r := out.(richOut)
		if o.kind == "Versions" {
			return []interface{}{s}
		}
		if o.kind == "Multi" && o.watched {
			if !r.known {
				next, _ := apply(s, o)
				return []interface{}{s, next}
			}
			if r.result == `{"Multi":null}` {
				return []interface{}{s}
			}
		}
		next, predicted := apply(s, o)
		if !r.known || result(predicted) == r.result {
			return []interface{}{next}
		}
		return nil
	},
	Equal: func(a, b interface{}) bool {
		x, y := a.(richState), b.(richState)
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || v.list != w.list || v.s != w.s || len(v.l) != len(w.l) {
				return false
			}
			for i := range v.l {
				if v.l[i] != w.l[i] {
					return false
				}
			}
		}
		return true
	},
	DescribeOperation: func(in, out interface{}) string {
		return fmt.Sprintf("%s(%s) -> %s", in.(richIn).op.kind, in.(richIn).op.key, out.(richOut).result)
	},
}

// partitionRich: connected groups of operations (shared keys; a scan connects every key
// of the history in its range), as the Rust checker splits a rich history.
func partitionRich(h []porcupine.Operation) [][]porcupine.Operation {
	all := map[string]bool{}
	for _, op := range h {
		for _, k := range op.Input.(richIn).op.footprint() {
			all[k] = true
		}
	}
	parent := map[string]string{}
	var find func(string) string
	find = func(k string) string {
		if p, ok := parent[k]; ok && p != k {
			r := find(p)
			parent[k] = r
			return r
		}
		parent[k] = k
		return k
	}
	union := func(a, b string) { parent[find(a)] = find(b) }
	opKeys := make([][]string, len(h))
	for i, op := range h {
		o := op.Input.(richIn).op
		ks := o.footprint()
		for _, r := range o.scans() {
			for k := range all {
				if inRange(k, r) {
					ks = append(ks, k)
				}
			}
			// A scan over keys nobody names still forms a group: name it by its range.
			ks = append(ks, "\x00scan:"+r[0]+"\x00"+r[1])
		}
		for _, k := range ks[1:] {
			union(ks[0], k)
		}
		opKeys[i] = ks
	}
	groups := map[string][]porcupine.Operation{}
	var order []string
	for i, op := range h {
		root := find(opKeys[i][0])
		if _, ok := groups[root]; !ok {
			order = append(order, root)
		}
		groups[root] = append(groups[root], op)
	}
	sort.Strings(order)
	var parts [][]porcupine.Operation
	for _, r := range order {
		parts = append(parts, groups[r])
	}
	return parts
}

// classicAsRich maps a get/put/delete/cas operation of a mixed history onto the rich model.
func classicAsRich(o op) (richOp, string, error) {
	switch o.Kind {
	case "get":
		return richOp{kind: "Get", key: o.Key}, "", nil
	case "put":
		return richOp{kind: "Put", key: o.Key, value: o.Value}, "", nil
	case "delete":
		return richOp{kind: "Delete", key: o.Key}, "", nil
	case "cas":
		return richOp{kind: "Cas", key: o.Key, expect: o.Expect, value: o.Value}, "", nil
	}
	return richOp{}, "", fmt.Errorf("unknown kind %q", o.Kind)
}

// classicResult: the recorded output of a classic operation as the rich result JSON.
func classicResult(o op) string {
	switch o.Kind {
	case "get":
		return result(map[string]interface{}{"Value": optBytes(o.Output.Value)})
	case "put":
		return result("Done")
	case "delete":
		return result(map[string]interface{}{"Deleted": o.Output.Existed})
	default:
		return result(map[string]interface{}{"Cas": map[string]interface{}{"ok": o.Output.Ok, "current": optBytes(o.Output.Current)}})
	}
}

// loadRich turns the operations of a history with "op" operations into Porcupine's.
func loadRich(path string, ops []op) ([]porcupine.Operation, error) {
	out := make([]porcupine.Operation, 0, len(ops))
	for n, o := range ops {
		var ro richOp
		var err error
		if o.Kind == "op" {
			if len(o.Op) == 0 {
				return nil, fmt.Errorf("%s: op %d: kind \"op\" without \"op\"", path, n)
			}
			ro, err = parseOp(o.Op)
		} else {
			ro, _, err = classicAsRich(o)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: op %d: %v", path, n, err)
		}
		if o.Kind == "put" && o.Value == nil {
			return nil, fmt.Errorf("%s: op %d: put without a value", path, n)
		}
		ret := int64(1<<63 - 1)
		res := richOut{}
		if o.Return != nil {
			if o.Output == nil {
				return nil, fmt.Errorf("%s: op %d: returned operation without output", path, n)
			}
			if *o.Return < o.Call {
				return nil, fmt.Errorf("%s: op %d: returns before its call", path, n)
			}
			if o.Output.Rejected {
				continue
			}
			ret = *o.Return
			if o.Kind == "op" {
				if len(o.Output.Result) == 0 {
					return nil, fmt.Errorf("%s: op %d: \"op\" output without \"result\"", path, n)
				}
				c, err := canonRaw(o.Output.Result)
				if err != nil {
					return nil, fmt.Errorf("%s: op %d: result: %v", path, n, err)
				}
				res = richOut{known: true, result: normalizeErrors(c)}
			} else {
				res = richOut{known: true, result: classicResult(o)}
			}
		}
		out = append(out, porcupine.Operation{ClientId: n, Input: richIn{op: ro}, Call: o.Call, Output: res, Return: ret})
	}
	return out, nil
}

func hasRich(ops []op) bool {
	for _, o := range ops {
		if o.Kind == "op" {
			return true
		}
	}
	return false
}
