package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Shovels: moves that keep running in the background (RabbitMQ's dynamic
// shovel parameter, as its UI's "Move messages" uses it). Within one
// Warren a shovel runs in-process on top of transfer, so each message is
// acked from the source only once the destination has it. With
// DeleteAfter ShovelQueueLength (the UI's choice) or a number it stops
// after that many messages and deletes its parameter, as RabbitMQ; with
// ShovelNever it keeps moving until stopped. A shovel's parameter is kept
// in the definitions store with the user it acts for, so that
// ResumeShovels restarts it after a restart with the same permissions.

// ShovelComponent is the runtime parameter component of shovels.
const ShovelComponent = "shovel"

// ShovelSpec.DeleteAfter values other than a count.
const (
	// ShovelNever moves until the shovel is stopped.
	ShovelNever = 0
	// ShovelQueueLength moves as many messages as the source holds when
	// the shovel starts.
	ShovelQueueLength = -1
	// ShovelNothing moves nothing: the shovel finishes at once
	// (src-delete-after 0).
	ShovelNothing = -2
)

// ShovelSpec is a shovel: a move from a queue to a queue or exchange of
// the same vhost.
type ShovelSpec struct {
	Name     string
	SrcQueue string
	To       MoveTarget
	// DeleteAfter is how many messages to move before the shovel
	// finishes and its parameter is deleted: a count, ShovelNever,
	// ShovelQueueLength or ShovelNothing.
	DeleteAfter int
	// Value is the shovel parameter as RabbitMQ's API shows it (src-uri,
	// src-queue, dest-uri, ...): ParseShovel keeps the one it read, and
	// StartShovel makes one when it is nil.
	Value map[string]any
}

// ShovelStatus is a running shovel.
type ShovelStatus struct {
	VHost string
	Spec  ShovelSpec
	// User is the user the shovel acts for ("" when Trusted).
	User      string
	Started   time.Time
	Moved     int
	State     string // "running"
	LastError string // the last move's error, if it stopped early
}

// ShovelValueError is a shovel parameter that ParseShovel refuses.
type ShovelValueError struct{ Msg string }

func (e *ShovelValueError) Error() string { return "invalid shovel: " + e.Msg }

// ErrShovelsHalting is StartShovel's answer while HaltShovels runs.
var ErrShovelsHalting = errors.New("shovels are being halted")

// moveState is the broker's replays, moves and shovels.
type moveState struct {
	onPublish atomic.Pointer[func(vhost, exchange string, routed bool)]

	mu      sync.Mutex
	shovels map[shovelKey]*shovel
	halting bool
	wg      sync.WaitGroup
}

type shovelKey struct{ vhost, name string }

type shovel struct {
	vhost   string
	spec    ShovelSpec
	act     Actor
	cancel  context.CancelFunc
	started time.Time
	moved   int    // under moveState.mu
	lastErr string // under moveState.mu
}

// shovelURIVHost returns the vhost an amqp URI names ("/" when it names
// none) and whether it points at this broker (no host, or a local one).
func shovelURIVHost(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", false
	}
	vh := "/"
	if p := strings.TrimPrefix(u.EscapedPath(), "/"); p != "" {
		if vh, err = url.PathUnescape(p); err != nil {
			return "", false
		}
	}
	switch h := u.Hostname(); h {
	case "", "localhost", "127.0.0.1", "::1":
		return vh, true
	}
	return vh, false
}

// ParseShovel reads a dynamic shovel parameter's value, as RabbitMQ's API
// takes it: a move between two queues (or to an exchange) of vhost v,
// both URIs naming this Warren and v. Its errors are *ShovelValueError.
func ParseShovel(v *VHost, name string, value map[string]any) (ShovelSpec, error) {
	str := func(k string) string { s, _ := value[k].(string); return s }
	sp := ShovelSpec{Name: name, Value: value, SrcQueue: str("src-queue"),
		To: MoveTarget{Queue: str("dest-queue"), Exchange: str("dest-exchange")}}
	if k, ok := value["dest-exchange-key"].(string); ok {
		sp.To.RoutingKey = &k
	}
	invalid := func(format string, args ...any) (ShovelSpec, error) {
		return ShovelSpec{}, &ShovelValueError{Msg: fmt.Sprintf(format, args...)}
	}
	for _, k := range []string{"src-uri", "dest-uri"} {
		vh, local := shovelURIVHost(str(k))
		if !local {
			return invalid("%s: only amqp:// URIs of this Warren are supported (got \"%s\")", k, str(k))
		}
		if vh != v.Name {
			return invalid("%s: moves across vhosts are not supported (\"%s\" is not vhost '%s')", k, str(k), v.Name)
		}
	}
	switch {
	case sp.SrcQueue == "":
		return invalid("src-queue is required (src-exchange is not supported)")
	case sp.To.Queue == "" && sp.To.Exchange == "" && value["dest-exchange"] == nil:
		return invalid("dest-queue or dest-exchange is required")
	}
	switch d := value["src-delete-after"].(type) {
	case nil:
		sp.DeleteAfter = ShovelNever
	case string:
		switch d {
		case "queue-length":
			sp.DeleteAfter = ShovelQueueLength
		case "never":
			sp.DeleteAfter = ShovelNever
		default:
			return invalid("src-delete-after: \"%s\" is not \"queue-length\", \"never\" or a number", d)
		}
	default:
		n, ok := JSONInt(d)
		if !ok || n < 0 {
			return invalid("src-delete-after must be \"queue-length\", \"never\" or a non-negative integer")
		}
		sp.DeleteAfter = int(n)
		if n == 0 {
			sp.DeleteAfter = ShovelNothing
		}
	}
	if err := checkShovelQueues(v, sp); err != nil {
		return ShovelSpec{}, err
	}
	return sp, nil
}

// checkShovelQueues checks that the queues sp names exist in v.
func checkShovelQueues(v *VHost, sp ShovelSpec) error {
	if v.Queue(sp.SrcQueue) == nil {
		return &ShovelValueError{Msg: fmt.Sprintf("src-queue: no queue '%s' in vhost '%s'", sp.SrcQueue, v.Name)}
	}
	if sp.To.Queue != "" && v.Queue(sp.To.Queue) == nil {
		return &ShovelValueError{Msg: fmt.Sprintf("dest-queue: no queue '%s' in vhost '%s'", sp.To.Queue, v.Name)}
	}
	return nil
}

// value is the parameter value of a spec made without one.
func (sp ShovelSpec) value(vhost string) map[string]any {
	if sp.Value != nil {
		return sp.Value
	}
	uri := "amqp:///" + url.PathEscape(vhost)
	m := map[string]any{"src-uri": uri, "dest-uri": uri, "src-queue": sp.SrcQueue}
	switch {
	case sp.To.Queue != "":
		m["dest-queue"] = sp.To.Queue
	default:
		m["dest-exchange"] = sp.To.Exchange
		if sp.To.RoutingKey != nil {
			m["dest-exchange-key"] = *sp.To.RoutingKey
		}
	}
	switch sp.DeleteAfter {
	case ShovelNever:
		m["src-delete-after"] = "never"
	case ShovelQueueLength:
		m["src-delete-after"] = "queue-length"
	case ShovelNothing:
		m["src-delete-after"] = 0
	default:
		m["src-delete-after"] = sp.DeleteAfter
	}
	return m
}

// StartShovel starts shovel sp in v as act, replacing a running shovel of
// the same name (replaced says so). It checks what a client moving the
// messages would need, read on the source queue and write on the
// destination exchange (an *AccessRefusedError), and then each republish
// as act; it keeps the shovel's parameter, with act's user, so that
// ResumeShovels restarts it. RabbitMQ's dynamic shovel (a plugin) checks
// only that the user may use the vhost.
func (b *Broker) StartShovel(act Actor, v *VHost, sp ShovelSpec) (replaced bool, err error) {
	if sp.Name == "" {
		return false, &ShovelValueError{Msg: "a shovel needs a name"}
	}
	if sp.DeleteAfter < ShovelNothing {
		return false, &ShovelValueError{Msg: "src-delete-after must be \"queue-length\", \"never\" or a non-negative integer"}
	}
	if err := checkShovelQueues(v, sp); err != nil {
		return false, err
	}
	if err := b.authorizeMove(act, v, sp.SrcQueue, sp.To); err != nil {
		return false, err
	}
	sp.Value = maps.Clone(sp.value(v.Name))
	if err := b.setParameter(v.Name, ShovelComponent, sp.Name, sp.Value, act.user); err != nil {
		return false, err
	}
	return b.runShovel(act, v, sp)
}

// runShovel starts the goroutine of sp, replacing the shovel of the same
// name.
func (b *Broker) runShovel(act Actor, v *VHost, sp ShovelSpec) (replaced bool, err error) {
	src := v.Queue(sp.SrcQueue)
	if src == nil {
		return false, &ShovelValueError{Msg: fmt.Sprintf("src-queue: no queue '%s' in vhost '%s'", sp.SrcQueue, v.Name)}
	}
	key := shovelKey{v.Name, sp.Name}
	ms := &b.moves
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shovel{vhost: v.Name, spec: sp, act: act, cancel: cancel, started: time.Now()}
	ms.mu.Lock()
	if ms.halting {
		ms.mu.Unlock()
		cancel()
		return false, ErrShovelsHalting
	}
	if ms.shovels == nil {
		ms.shovels = map[shovelKey]*shovel{}
	}
	old := ms.shovels[key]
	ms.shovels[key] = sh
	ms.wg.Add(1)
	ms.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	go func() {
		defer ms.wg.Done()
		b.shovelLoop(ctx, v, src, sh)
	}()
	return old != nil, nil
}

// StopShovel stops the shovel name of vhost and deletes its parameter; it
// reports whether there was one. A move stops between two messages; the
// rest stay in the source.
func (b *Broker) StopShovel(vhost, name string) bool {
	ms := &b.moves
	key := shovelKey{vhost, name}
	ms.mu.Lock()
	sh := ms.shovels[key]
	delete(ms.shovels, key)
	ms.mu.Unlock()
	if sh == nil {
		return false
	}
	sh.cancel()
	b.DeleteParameter(vhost, ShovelComponent, name)
	return true
}

// HaltShovels stops every running shovel and waits for them, keeping
// their parameters, so that ResumeShovels restarts them (after a
// restart). Call it before the stores close. StartShovel fails while it
// runs.
func (b *Broker) HaltShovels() {
	ms := &b.moves
	ms.mu.Lock()
	ms.halting = true
	for k, sh := range ms.shovels {
		sh.cancel()
		delete(ms.shovels, k)
	}
	ms.mu.Unlock()
	ms.wg.Wait()
	ms.mu.Lock()
	ms.halting = false
	ms.mu.Unlock()
}

// ResumeShovels starts the shovels kept from before a restart that are
// not running, each as the user that started it (Trusted when kept
// without one: by Trusted code, or by a Warren that checked the user's
// permissions only at the start). One that no longer makes sense (its
// vhost or queue is gone, or its user lost a permission it needs) is
// dropped, its parameter removed, and logged.
func (b *Broker) ResumeShovels() {
	for _, p := range b.Parameters(ShovelComponent) {
		b.moves.mu.Lock()
		_, running := b.moves.shovels[shovelKey{p.VHost, p.Name}]
		b.moves.mu.Unlock()
		if running {
			continue
		}
		value, _ := p.Value.(map[string]any)
		act := Trusted
		if p.User != "" {
			act = AsUser(p.User)
		}
		v := b.VHost(p.VHost)
		var err error = ErrNoVHost
		if v != nil {
			var sp ShovelSpec
			if sp, err = ParseShovel(v, p.Name, value); err == nil {
				if err = b.authorizeMove(act, v, sp.SrcQueue, sp.To); err == nil {
					_, err = b.runShovel(act, v, sp)
				}
			}
		}
		if err != nil {
			b.log.Warn("shovel not resumed; its parameter is removed", "vhost", p.VHost, "name", p.Name, "err", err)
			b.DeleteParameter(p.VHost, ShovelComponent, p.Name)
			continue
		}
		b.log.Info("shovel resumed", "vhost", p.VHost, "name", p.Name)
	}
}

func (sh *shovel) status() ShovelStatus {
	return ShovelStatus{VHost: sh.vhost, Spec: sh.spec, User: sh.act.user, Started: sh.started,
		Moved: sh.moved, State: "running", LastError: sh.lastErr}
}

// Shovels returns the running shovels of vhost ("" for every vhost), by
// vhost and name.
func (b *Broker) Shovels(vhost string) []ShovelStatus {
	ms := &b.moves
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := []ShovelStatus{}
	for k, sh := range ms.shovels {
		if vhost == "" || k.vhost == vhost {
			out = append(out, sh.status())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].VHost < out[j].VHost || out[i].VHost == out[j].VHost && out[i].Spec.Name < out[j].Spec.Name
	})
	return out
}

// Shovel returns the running shovel name of vhost.
func (b *Broker) Shovel(vhost, name string) (ShovelStatus, bool) {
	ms := &b.moves
	ms.mu.Lock()
	defer ms.mu.Unlock()
	sh := ms.shovels[shovelKey{vhost, name}]
	if sh == nil {
		return ShovelStatus{}, false
	}
	return sh.status(), true
}

// shovelRetry is how long a shovel with nothing to move waits before it
// looks again.
const shovelRetry = 200 * time.Millisecond

// shovelLoop moves messages until the shovel is done or cancelled.
func (b *Broker) shovelLoop(ctx context.Context, v *VHost, src *Queue, sh *shovel) {
	sp := sh.spec
	pick := func(m *Message) (string, *Message, bool) {
		return sp.To.exchange(), sp.To.message(m), true
	}
	bounded, remaining := sp.DeleteAfter != ShovelNever, sp.DeleteAfter
	switch sp.DeleteAfter {
	case ShovelQueueLength:
		remaining, _ = src.Counts()
	case ShovelNothing:
		remaining = 0
	}
	ms := &b.moves
	for ctx.Err() == nil && (!bounded || remaining > 0) {
		res := b.transfer(ctx, sh.act, v, src, max(remaining, 0), pick)
		ms.mu.Lock()
		sh.moved += res.Moved
		sh.lastErr = ""
		if res.Err != nil {
			sh.lastErr = res.Err.Error()
		}
		ms.mu.Unlock()
		remaining -= res.Moved
		if res.Moved > 0 {
			continue
		}
		if n, _ := src.Counts(); bounded && n == 0 && res.Err == nil {
			break // queue-length: others took the rest
		}
		t := time.NewTimer(shovelRetry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	ms.mu.Lock()
	done := ms.shovels[shovelKey{sh.vhost, sp.Name}] == sh && ctx.Err() == nil
	if done {
		delete(ms.shovels, shovelKey{sh.vhost, sp.Name})
	}
	ms.mu.Unlock()
	if done { // finished its job: the parameter goes, as RabbitMQ's does
		b.DeleteParameter(sh.vhost, ShovelComponent, sp.Name)
	}
}
