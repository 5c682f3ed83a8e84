package mgmt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// listOf replies with typed items as list does. Only a request with list
// parameters has them turned into maps (the parameters name fields by
// their JSON names).
func listOf[T any](c *call, items []T) error {
	q := c.r.URL.Query()
	if q.Get("sort") == "" && q.Get("sort_reverse") == "" && q.Get("name") == "" && q.Get("columns") == "" && q.Get("page") == "" {
		if items == nil {
			items = []T{}
		}
		return c.ok(items)
	}
	maps, err := asMaps(items)
	if err != nil {
		return err
	}
	return c.list(maps)
}

// asMaps is items as JSON objects.
func asMaps[T any](items []T) ([]map[string]any, error) {
	b, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	maps := []map[string]any{}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&maps); err != nil {
		return nil, err
	}
	return maps, nil
}

// list replies with items, applying RabbitMQ's list query parameters:
// sort and sort_reverse, name (with use_regex), columns, and pagination
// (page, page_size), which wraps the reply in a page object.
func (c *call) list(items []map[string]any) error {
	q := c.r.URL.Query()
	if key := q.Get("sort"); key != "" {
		sort.SliceStable(items, func(i, j int) bool { return lessAny(lookup(items[i], key), lookup(items[j], key)) })
	}
	if q.Get("sort_reverse") == "true" {
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	}
	total := len(items)
	if name := q.Get("name"); name != "" {
		match := func(s string) bool { return strings.Contains(s, name) }
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				return badRequest(fmt.Sprintf("invalid regex: %s", name))
			}
			match = re.MatchString
		}
		kept := items[:0]
		for _, it := range items {
			if s, _ := it["name"].(string); match(s) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if cols := q.Get("columns"); cols != "" {
		// As RabbitMQ: a nested column keeps its whole top-level value.
		var keys []string
		for _, k := range strings.Split(cols, ",") {
			keys = append(keys, strings.SplitN(strings.TrimSpace(k), ".", 2)[0])
		}
		for i, it := range items {
			items[i] = project(it, keys)
		}
	}
	if q.Get("page") == "" {
		return c.ok(items)
	}
	// RabbitMQ's pagination errors, word for word.
	page, err := strconv.Atoi(q.Get("page"))
	size := 100
	if ps := q.Get("page_size"); ps != "" && err == nil {
		size, err = strconv.Atoi(ps)
	}
	if err != nil {
		return badRequest("Pagination parameters are invalid")
	}
	if page < 1 || size < 1 || size > 500 {
		return &apiError{Status: 400, Err: "invalid_pagination_parameters",
			Reason: fmt.Sprintf("Invalid pagination parameters: page number %d, page size %d", page, size)}
	}
	filtered := len(items)
	pages := (filtered + size - 1) / size
	if page > max(pages, 1) {
		return &apiError{Status: 400, Err: "page_out_of_range",
			Reason: fmt.Sprintf("Page out of range, page: %d page size: %d, len: %d", page, size, filtered)}
	}
	from := min((page-1)*size, filtered)
	to := min(from+size, filtered)
	return c.ok(map[string]any{"filtered_count": filtered, "item_count": to - from, "items": items[from:to],
		"page": page, "page_count": pages, "page_size": size, "total_count": total})
}

// lookup returns the value at a dotted path.
func lookup(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// project keeps the dotted paths keys of m.
func project(m map[string]any, keys []string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		parts := strings.Split(strings.TrimSpace(k), ".")
		v := lookup(m, strings.Join(parts, "."))
		if v == nil {
			if _, ok := m[parts[0]]; !ok {
				continue
			}
		}
		dst := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := dst[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				dst[p] = next
			}
			dst = next
		}
		dst[parts[len(parts)-1]] = v
	}
	return out
}

func lessAny(a, b any) bool {
	fa, aok := num(a)
	fb, bok := num(b)
	if aok && bok {
		return fa < fb
	}
	return fmt.Sprint(a) < fmt.Sprint(b)
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}
