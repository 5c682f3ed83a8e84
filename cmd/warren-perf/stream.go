package main

// warren-perf stream: a load client of RabbitMQ's stream protocol (issue
// 25) as light as warren-perf's AMQP one, so that the broker, not the
// client, is the limit on a small machine: messages are encoded once and
// sent in Publish frames of --batch, confirms are counted as they come,
// and a consumer walks each delivered chunk's entries without decoding
// the AMQP 1.0 messages (as warren-perf treats AMQP bodies as bytes).
//
//	warren-perf stream --addr 127.0.0.1:5552 --stream s --mode publish --duration 10s
//	warren-perf stream --addr 127.0.0.1:5552 --stream s --mode consume --count 2000000
//
// The stream must exist. It prints a JSON object with confirm_rate,
// confirmed, consume_rate, consumed and client_cpu_percent.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sp "github.com/warrenmq/warren/streamproto"
)

type streamOptions struct {
	addr, user, pass, vhost, stream, mode string
	producers, batch, inflight, size      int
	count, credit                         int
	duration, warmup                      time.Duration
}

type streamResult struct {
	ConfirmRate      float64 `json:"confirm_rate"`
	Confirmed        uint64  `json:"confirmed"`
	ConsumeRate      float64 `json:"consume_rate"`
	Consumed         uint64  `json:"consumed"`
	ClientCPUPercent float64 `json:"client_cpu_percent"`
}

func runStream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o streamOptions
	fs := flag.NewFlagSet("warren-perf stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:5552", "the broker's stream-protocol address")
	fs.StringVar(&o.user, "user", "guest", "user")
	fs.StringVar(&o.pass, "password", "guest", "password")
	fs.StringVar(&o.vhost, "vhost", "/", "virtual host")
	fs.StringVar(&o.stream, "stream", "", "the stream (it must exist)")
	fs.StringVar(&o.mode, "mode", "publish", "publish or consume")
	fs.IntVar(&o.producers, "producers", 2, "publish: producers, a connection each")
	fs.IntVar(&o.batch, "batch", 1000, "publish: messages per Publish frame")
	fs.IntVar(&o.inflight, "inflight", 100000, "publish: unconfirmed messages per producer at most")
	fs.IntVar(&o.size, "size", 16, "publish: message body bytes")
	fs.IntVar(&o.count, "count", 0, "publish: messages in all (0: for --duration); consume: messages to read")
	fs.IntVar(&o.credit, "credit", 10, "consume: initial credit (chunks)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "publish: how long (with --warmup)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "publish: not counted at the start")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.stream == "" {
		return errors.New("--stream is required")
	}
	cpu0, _ := procCPU(os.Getpid())
	t0 := time.Now()
	var res streamResult
	var err error
	switch o.mode {
	case "publish":
		res, err = streamPublishLoad(ctx, o)
	case "consume":
		res, err = streamConsumeLoad(ctx, o)
	default:
		return fmt.Errorf("--mode %q: publish or consume", o.mode)
	}
	if err != nil {
		return err
	}
	if cpu1, err := procCPU(os.Getpid()); err == nil {
		res.ClientCPUPercent = round1(100 * float64(cpu1-cpu0) / float64(time.Since(t0)))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// streamConn is a client connection after Open.
type streamConn struct {
	nc   net.Conn
	w    *bufio.Writer
	r    *sp.Reader
	corr uint32
}

func dialStream(o streamOptions) (*streamConn, error) {
	nc, err := net.DialTimeout("tcp", o.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetReadBuffer(1 << 20)
		tc.SetWriteBuffer(1 << 20)
	}
	c := &streamConn{nc: nc, w: bufio.NewWriterSize(nc, 256<<10), r: sp.NewReader(nc, 8<<20)}
	fail := func(err error) (*streamConn, error) {
		nc.Close()
		return nil, err
	}
	// peer properties, SASL PLAIN, tune, open
	if _, err := c.call(sp.KeyPeerProperties, func(e *sp.Enc) { e.Map([]string{"product"}, map[string]string{"product": "warren-perf"}) }); err != nil {
		return fail(fmt.Errorf("peer properties: %w", err))
	}
	if _, err := c.call(sp.KeySaslHandshake, func(*sp.Enc) {}); err != nil {
		return fail(fmt.Errorf("sasl handshake: %w", err))
	}
	if _, err := c.call(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00" + o.user + "\x00" + o.pass))
	}); err != nil {
		return fail(fmt.Errorf("sasl authenticate: %w", err))
	}
	f, err := c.r.Next()
	if err != nil || f.Key != sp.KeyTune {
		return fail(fmt.Errorf("no tune from the server (%v, key %d)", err, f.Key))
	}
	d := sp.NewDec(f.Body)
	frameMax := d.U32()
	c.send(func(e *sp.Enc) {
		e.Start(sp.KeyTuneResponse, 1)
		e.U32(frameMax)
		e.U32(0) // no heartbeats
		e.Finish()
	})
	if _, err := c.call(sp.KeyOpen, func(e *sp.Enc) { e.Str(o.vhost) }); err != nil {
		return fail(fmt.Errorf("open: %w", err))
	}
	return c, c.w.Flush()
}

func (c *streamConn) send(fn func(e *sp.Enc)) {
	var e sp.Enc
	fn(&e)
	c.w.Write(e.B)
}

// call sends a request and reads frames until its response (ok or an error).
func (c *streamConn) call(key uint16, body func(e *sp.Enc)) (*sp.Dec, error) {
	c.corr++
	corr := c.corr
	var e sp.Enc
	e.Start(key, 1)
	e.U32(corr)
	body(&e)
	e.Finish()
	if _, err := c.w.Write(e.B); err != nil {
		return nil, err
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	for {
		f, err := c.r.Next()
		if err != nil {
			return nil, err
		}
		if f.Key != key|sp.ResponseBit {
			continue // (a tune, a heartbeat...)
		}
		d := sp.NewDec(f.Body)
		if d.U32() != corr {
			continue
		}
		if code := d.U16(); code != sp.OK {
			return nil, fmt.Errorf("%s: response code %d", sp.KeyName(key), code)
		}
		return d, nil
	}
}

// amqp10Data is an AMQP 1.0 message of one data section holding body.
func amqp10Data(body []byte) []byte {
	m := []byte{0x00, 0x53, 0x75}
	if len(body) < 256 {
		m = append(m, 0xa0, byte(len(body)))
	} else {
		m = append(m, 0xb0)
		m = binary.BigEndian.AppendUint32(m, uint32(len(body)))
	}
	return append(m, body...)
}

func streamPublishLoad(ctx context.Context, o streamOptions) (streamResult, error) {
	msg := amqp10Data(make([]byte, o.size))
	var confirmed atomic.Uint64
	var counted atomic.Uint64 // confirmed after the warm-up
	counting := atomic.Bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, o.producers)
	per := o.count / max(o.producers, 1)
	for range o.producers {
		c, err := dialStream(o)
		if err != nil {
			return streamResult{}, err
		}
		defer c.nc.Close()
		if _, err := c.call(sp.KeyDeclarePublisher, func(e *sp.Enc) {
			e.U8(0)
			e.Str("")
			e.Str(o.stream)
		}); err != nil {
			return streamResult{}, err
		}
		var unconfirmed atomic.Int64
		room := make(chan struct{}, 1)
		done := make(chan struct{})
		wg.Add(2)
		go func() { // confirms
			defer wg.Done()
			defer close(done)
			for {
				f, err := c.r.Next()
				if err != nil {
					return
				}
				switch f.Key {
				case sp.KeyPublishConfirm:
					d := sp.NewDec(f.Body)
					d.U8()
					n := d.U32()
					unconfirmed.Add(-int64(n))
					confirmed.Add(uint64(n))
					if counting.Load() {
						counted.Add(uint64(n))
					}
					select {
					case room <- struct{}{}:
					default:
					}
				case sp.KeyPublishError:
					errs <- errors.New("publish error from the broker")
					return
				}
			}
		}()
		go func() { // publishes
			defer wg.Done()
			var e sp.Enc
			seq := uint64(0)
			sent := 0
			for {
				select {
				case <-stop:
					return
				case <-done:
					return
				default:
				}
				if per > 0 && sent >= per {
					return
				}
				n := o.batch
				if per > 0 {
					n = min(n, per-sent)
				}
				for unconfirmed.Load()+int64(n) > int64(o.inflight) {
					select {
					case <-room:
					case <-stop:
						return
					case <-done:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
				e.B = e.B[:0]
				e.Start(sp.KeyPublish, 1)
				e.U8(0)
				e.U32(uint32(n))
				for range n {
					seq++
					e.U64(seq)
					e.Bytes(msg)
				}
				e.Finish()
				unconfirmed.Add(int64(n))
				if _, err := c.w.Write(e.B); err != nil {
					return
				}
				if err := c.w.Flush(); err != nil {
					return
				}
				sent += n
			}
		}()
	}
	var res streamResult
	if o.count > 0 {
		t0 := time.Now()
		for confirmed.Load() < uint64(per*o.producers) {
			select {
			case err := <-errs:
				close(stop)
				return res, err
			case <-ctx.Done():
				close(stop)
				return res, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		res.Confirmed = confirmed.Load()
		res.ConfirmRate = round1(float64(res.Confirmed) / time.Since(t0).Seconds())
		close(stop)
		return res, nil
	}
	select {
	case err := <-errs:
		close(stop)
		return res, err
	case <-time.After(o.warmup):
	}
	counting.Store(true)
	t0 := time.Now()
	select {
	case err := <-errs:
		close(stop)
		return res, err
	case <-time.After(o.duration - o.warmup):
	case <-ctx.Done():
	}
	res.Confirmed = counted.Load()
	res.ConfirmRate = round1(float64(res.Confirmed) / time.Since(t0).Seconds())
	close(stop)
	return res, nil
}

func streamConsumeLoad(ctx context.Context, o streamOptions) (streamResult, error) {
	c, err := dialStream(o)
	if err != nil {
		return streamResult{}, err
	}
	defer c.nc.Close()
	if _, err := c.call(sp.KeySubscribe, func(e *sp.Enc) {
		e.U8(0)
		e.Str(o.stream)
		e.U16(1) // first
		e.U16(uint16(o.credit))
		e.U32(0) // no properties
	}); err != nil {
		return streamResult{}, err
	}
	var credit sp.Enc
	credit.Start(sp.KeyCredit, 1)
	credit.U8(0)
	credit.U16(1)
	credit.Finish()
	t0 := time.Now()
	var consumed uint64
	for consumed < uint64(o.count) {
		if ctx.Err() != nil {
			return streamResult{}, ctx.Err()
		}
		f, err := c.r.Next()
		if err != nil {
			return streamResult{}, fmt.Errorf("after %d messages: %w", consumed, err)
		}
		if f.Key != sp.KeyDeliver {
			continue
		}
		b := f.Body
		if len(b) < 1+48 {
			return streamResult{}, errors.New("a short deliver")
		}
		chunk := b[1:]
		if f.Version >= 2 {
			chunk = chunk[8:] // the committed chunk id
		}
		typ, records := chunk[1], binary.BigEndian.Uint32(chunk[4:])
		data := chunk[48:]
		// walk the entries: simple ones (a size, the message) and
		// sub-batches (a header and their bytes)
		for len(data) >= 4 {
			if data[0]&0x80 == 0 {
				n := binary.BigEndian.Uint32(data)
				if uint64(len(data)) < 4+uint64(n) {
					break
				}
				data = data[4+n:]
				continue
			}
			if len(data) < 11 {
				break
			}
			n := binary.BigEndian.Uint32(data[7:])
			if uint64(len(data)) < 11+uint64(n) {
				break
			}
			data = data[11+n:]
		}
		if typ == 0 {
			consumed += uint64(records)
		}
		c.w.Write(credit.B)
		c.w.Flush()
	}
	el := time.Since(t0).Seconds()
	return streamResult{Consumed: consumed, ConsumeRate: round1(float64(consumed) / el)}, nil
}
