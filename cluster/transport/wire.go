package transport

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame kinds.
const (
	kindRequest  = 1 // call request: id, service, request body
	kindResponse = 2 // call response: id, response body
	kindError    = 3 // call response carrying a handler error: id, error text
	kindMessage  = 4 // one-way message: service, body (id 0)
	kindPing     = 5 // heartbeat, empty
)

// headerLen is the fixed frame header: u32 body length, u8 kind, u8 service,
// u64 request id.
const headerLen = 14

type frame struct {
	kind byte
	svc  byte
	id   uint64
	body []byte
}

var (
	errFrameTooLarge = errors.New("frame too large")
	errBadKind       = errors.New("unknown frame kind")
)

// readFrame reads one frame from r. It checks the announced length against
// max before allocating, and rejects unknown kinds.
func readFrame(r *bufio.Reader, max int) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	f := frame{kind: h[4], svc: h[5], id: binary.BigEndian.Uint64(h[6:14])}
	if f.kind < kindRequest || f.kind > kindPing {
		return frame{}, fmt.Errorf("%w %d", errBadKind, f.kind)
	}
	if uint64(n) > uint64(max) {
		return frame{}, fmt.Errorf("%w: %d bytes announced, limit %d", errFrameTooLarge, n, max)
	}
	if n > 0 {
		f.body = make([]byte, n)
		if _, err := io.ReadFull(r, f.body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
	}
	return f, nil
}

// writeFrame appends f to w (no flush).
func writeFrame(w *bufio.Writer, f frame) error {
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(f.body)))
	h[4], h[5] = f.kind, f.svc
	binary.BigEndian.PutUint64(h[6:14], f.id)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(f.body)
	return err
}

// Handshake.

const (
	magic       = "WRNT"
	wireVersion = 1
	nonceLen    = 32
	maxNameLen  = 255
	maxIDLen    = 255
	maxReason   = 1024

	statusOK      = 0
	statusRefused = 1
)

type hello struct {
	nonce [nonceLen]byte
	name  string
	id    string
}

func newHello(name, id string) (hello, error) {
	h := hello{name: name, id: id}
	if len(name) > maxNameLen || len(id) > maxIDLen {
		return h, errors.New("node name or cluster id too long")
	}
	_, err := rand.Read(h.nonce[:])
	return h, err
}

func writeHello(w io.Writer, h hello) error {
	b := make([]byte, 0, 4+1+nonceLen+2+len(h.name)+len(h.id))
	b = append(b, magic...)
	b = append(b, wireVersion)
	b = append(b, h.nonce[:]...)
	b = append(b, byte(len(h.name)))
	b = append(b, h.name...)
	b = append(b, byte(len(h.id)))
	b = append(b, h.id...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (hello, error) {
	var h hello
	var pre [4 + 1 + nonceLen + 1]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return h, err
	}
	if string(pre[:4]) != magic {
		return h, errors.New("not a warren cluster peer (bad magic)")
	}
	if pre[4] != wireVersion {
		return h, fmt.Errorf("unsupported transport version %d", pre[4])
	}
	copy(h.nonce[:], pre[5:5+nonceLen])
	name := make([]byte, int(pre[len(pre)-1])+1)
	if _, err := io.ReadFull(r, name); err != nil {
		return h, err
	}
	h.name = string(name[:len(name)-1])
	id := make([]byte, int(name[len(name)-1]))
	if _, err := io.ReadFull(r, id); err != nil {
		return h, err
	}
	h.id = string(id)
	if h.name == "" {
		return h, errors.New("empty node name")
	}
	return h, nil
}

// proof is HMAC-SHA256(secret, role label, both hellos). The role label
// keeps one side's proof from being replayed as the other's; the fresh
// nonces keep an old proof from being replayed at all.
func proof(secret []byte, role string, dialer, acceptor hello) []byte {
	m := hmac.New(sha256.New, secret)
	field := func(b []byte) {
		var l [2]byte
		binary.BigEndian.PutUint16(l[:], uint16(len(b)))
		m.Write(l[:])
		m.Write(b)
	}
	field([]byte("warren-transport-v1 " + role))
	field(dialer.nonce[:])
	field(acceptor.nonce[:])
	field([]byte(dialer.name))
	field([]byte(acceptor.name))
	field([]byte(dialer.id))
	field([]byte(acceptor.id))
	return m.Sum(nil)
}

// idMismatch returns the refusal text when both ids are set and differ.
func idMismatch(selfName, selfID, peerName, peerID string) error {
	if selfID != "" && peerID != "" && selfID != peerID {
		return fmt.Errorf("cluster id mismatch: this node %s is in cluster %q, peer %s is in cluster %q", selfName, selfID, peerName, peerID)
	}
	return nil
}

// refusedError is a handshake refusal sent by the acceptor.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return "refused by peer: " + e.reason }

// dialHandshake runs the dialer's side: hello out, hello in, proof out,
// status (+ acceptor proof) in. It returns the acceptor's hello.
func dialHandshake(rw io.ReadWriter, secret []byte, self, selfID, want string) (hello, error) {
	me, err := newHello(self, selfID)
	if err != nil {
		return hello{}, err
	}
	if err := writeHello(rw, me); err != nil {
		return hello{}, err
	}
	them, err := readHello(rw)
	if err != nil {
		return hello{}, err
	}
	if want != "" && them.name != want {
		return hello{}, fmt.Errorf("dialled %s but the node there is %s", want, them.name)
	}
	if _, err := rw.Write(proof(secret, "dialer", me, them)); err != nil {
		return hello{}, err
	}
	var st [1]byte
	if _, err := io.ReadFull(rw, st[:]); err != nil {
		return hello{}, fmt.Errorf("no answer to our proof (wrong secret?): %w", err)
	}
	switch st[0] {
	case statusOK:
		got := make([]byte, sha256.Size)
		if _, err := io.ReadFull(rw, got); err != nil {
			return hello{}, err
		}
		if !hmac.Equal(got, proof(secret, "acceptor", me, them)) {
			return hello{}, errors.New("authentication failed: the peer does not know the cluster secret")
		}
	case statusRefused:
		var l [2]byte
		if _, err := io.ReadFull(rw, l[:]); err != nil {
			return hello{}, err
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		if n > maxReason {
			return hello{}, errors.New("refused by peer")
		}
		reason := make([]byte, n)
		if _, err := io.ReadFull(rw, reason); err != nil {
			return hello{}, err
		}
		return hello{}, &refusedError{string(reason)}
	default:
		return hello{}, fmt.Errorf("bad handshake status %d", st[0])
	}
	if err := idMismatch(self, selfID, them.name, them.id); err != nil {
		return hello{}, err
	}
	return them, nil
}

// acceptHandshake runs the acceptor's side. check, called once the dialer
// has proved the secret, may refuse the link (its error text is sent).
func acceptHandshake(rw io.ReadWriter, secret []byte, self, selfID string, check func(hello) error) (hello, error) {
	them, err := readHello(rw)
	if err != nil {
		return hello{}, err
	}
	me, err := newHello(self, selfID)
	if err != nil {
		return hello{}, err
	}
	if err := writeHello(rw, me); err != nil {
		return hello{}, err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(rw, got); err != nil {
		return hello{}, err
	}
	var refuse error
	if !hmac.Equal(got, proof(secret, "dialer", them, me)) {
		refuse = fmt.Errorf("authentication failed: %s does not know the cluster secret", them.name)
	} else if err := idMismatch(self, selfID, them.name, them.id); err != nil {
		refuse = err
	} else if err := check(them); err != nil {
		refuse = err
	}
	if refuse != nil {
		reason := refuse.Error()
		if len(reason) > maxReason {
			reason = reason[:maxReason]
		}
		b := []byte{statusRefused, 0, 0}
		binary.BigEndian.PutUint16(b[1:], uint16(len(reason)))
		rw.Write(append(b, reason...))
		return hello{}, refuse
	}
	if _, err := rw.Write(append([]byte{statusOK}, proof(secret, "acceptor", them, me)...)); err != nil {
		return hello{}, err
	}
	return them, nil
}
