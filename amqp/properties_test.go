package amqp

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func fullProperties() Properties {
	return Properties{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		Headers:         Table{"x-match": "all", "n": int32(3)},
		DeliveryMode:    2,
		Priority:        9,
		CorrelationID:   "corr",
		ReplyTo:         "amq.rabbitmq.reply-to",
		Expiration:      "60000",
		MessageID:       "msg-1",
		Timestamp:       time.Unix(1700000000, 0).UTC(),
		Type:            "order.created",
		UserID:          "guest",
		AppID:           "warren-test",
		ClusterID:       "c1",
	}
}

func TestPropertiesEachFlag(t *testing.T) {
	full := fullProperties()
	seeds := map[string][]byte{}
	v := reflect.ValueOf(full)
	flags := []uint16{FlagContentType, FlagContentEncoding, FlagHeaders, FlagDeliveryMode, FlagPriority,
		FlagCorrelationID, FlagReplyTo, FlagExpiration, FlagMessageID, FlagTimestamp, FlagType,
		FlagUserID, FlagAppID, FlagClusterID}
	for i, flag := range flags {
		// Only field i+1 (after Flags) set: the flag is derived from
		// the value.
		var p Properties
		pv := reflect.ValueOf(&p).Elem()
		pv.Field(i + 1).Set(v.Field(i + 1))
		b := AppendProperties(nil, &p)
		if got := uint16(b[0])<<8 | uint16(b[1]); got != flag {
			t.Errorf("%s: flags %04x, want %04x", pv.Type().Field(i+1).Name, got, flag)
		}
		var q Properties
		if err := DecodeProperties(b, &q); err != nil {
			t.Fatalf("%s: %v", pv.Type().Field(i+1).Name, err)
		}
		p.Flags = flag
		if !reflect.DeepEqual(p, q) {
			t.Errorf("%s: got %+v want %+v", pv.Type().Field(i+1).Name, q, p)
		}
		seeds[pv.Type().Field(i+1).Name] = b

		// Flag set, zero value: present on the wire with the zero value.
		z := Properties{Flags: flag}
		zb := AppendProperties(nil, &z)
		var zq Properties
		if err := DecodeProperties(zb, &zq); err != nil || zq.Flags != flag {
			t.Errorf("%s zero: flags %04x err %v", pv.Type().Field(i+1).Name, zq.Flags, err)
		}
	}
	b := AppendProperties(nil, &full)
	seeds["full"] = b
	seeds["none"] = AppendProperties(nil, nil)
	var q Properties
	if err := DecodeProperties(b, &q); err != nil {
		t.Fatal(err)
	}
	full.Flags = 0xFFFC
	if !reflect.DeepEqual(full, q) {
		t.Errorf("full: got %+v", q)
	}
	writeSeeds(t, "FuzzProperties", seeds)
}

func TestPropertiesFixture(t *testing.T) {
	p := Properties{ContentType: "t", DeliveryMode: 2, Timestamp: time.Unix(1, 0)}
	want := []byte{0x90, 0x40, 1, 't', 2, 0, 0, 0, 0, 0, 0, 0, 1}
	if got := AppendProperties(nil, &p); !bytes.Equal(got, want) {
		t.Fatalf("got % x want % x", got, want)
	}
	// Zero timestamp flagged present (epoch) is not the zero time.Time.
	var q Properties
	if err := DecodeProperties([]byte{0x00, 0x40, 0, 0, 0, 0, 0, 0, 0, 0}, &q); err != nil || q.Timestamp.Unix() != 0 || q.Flags != FlagTimestamp {
		t.Fatalf("%+v %v", q, err)
	}
	// The unused bit 0x0002 is accepted (as RabbitMQ does) and dropped.
	if err := DecodeProperties([]byte{0x80, 0x02, 1, 'a'}, &q); err != nil || q.Flags != FlagContentType || q.ContentType != "a" {
		t.Fatalf("0x0002: %+v %v", q, err)
	}
	// Clearing a decoded property needs both value and flag cleared.
	q = Properties{Flags: FlagContentType, ContentType: ""}
	if b := AppendProperties(nil, &q); !bytes.Equal(b, []byte{0x80, 0, 0}) {
		t.Fatalf("flag without value: % x", b)
	}
}

func TestPropertiesErrors(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":         {},
		"one byte":      {0x80},
		"continuation":  {0x00, 0x01, 0, 0},
		"flags missing": {},
		"truncated":     {0x80, 0x00, 9, 'a'},
		"trailing":      {0x00, 0x00, 1},
		"bad headers":   {0x20, 0x00, 0, 0, 0, 3, 1, 'k', 'Z'},
	} {
		var p Properties
		p.ContentType = "stale"
		err := DecodeProperties(b, &p)
		wantCode(t, err, FrameError, true)
		if !reflect.DeepEqual(p, Properties{}) {
			t.Errorf("%s: p not reset: %+v", name, p)
		}
	}
}

func TestHeaderFrame(t *testing.T) {
	p := fullProperties()
	f := AppendHeaderFrame(nil, 7, ClassBasic, 1<<33+5, &p)
	fr := NewFrameReader(bytes.NewReader(f), 0)
	fm, err := fr.ReadFrame()
	if err != nil || fm.Type != FrameHeader || fm.Channel != 7 {
		t.Fatalf("%+v %v", fm, err)
	}
	cid, size, q, err := DecodeHeader(fm.Payload)
	if err != nil || cid != ClassBasic || size != 1<<33+5 {
		t.Fatalf("%d %d %v", cid, size, err)
	}
	p.Flags = 0xFFFC
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("got %+v", q)
	}
	// Without properties.
	f = AppendHeaderFrame(nil, 1, ClassBasic, 0, nil)
	want := []byte{2, 0, 1, 0, 0, 0, 14, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xCE}
	if !bytes.Equal(f, want) {
		t.Fatalf("got % x", f)
	}
	_, _, _, err = DecodeHeader([]byte{0, 60, 0})
	if e := wantCode(t, err, FrameError, true); e.Text != "FRAME_ERROR - type 2, all octets = <<0,60,0>>: unknown_frame" {
		t.Fatalf("text %q", e.Text)
	}
	_, _, _, err = DecodeHeader(append(want[7:21], 0))
	wantCode(t, err, FrameError, true)
	// 12 bytes: fixed part present, flags missing (RabbitMQ: 541 INTERNAL_ERROR).
	_, _, _, err = DecodeHeader(want[7:19])
	if e := wantCode(t, err, FrameError, true); e.Text != "FRAME_ERROR - cannot decode <<>>" {
		t.Fatalf("text %q", e.Text)
	}
}
