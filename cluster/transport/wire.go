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

// Handshake (version 2: nothing about this node is said before the
// dialer has proved the secret).
const (
	magic       = "WRNT"
	wireVersion = 2
	nonceLen    = 32
	maxNameLen  = 255
	maxIDLen    = 255
	maxReason   = 1024

	statusOK      = 0
	statusRefused = 1
)

// hello is one side's part of the handshake. The dialer's is sent whole
// at once; the acceptor's nonce goes first and its name and id only
// after the dialer's proof checked out.
type hello struct {
	nonce [nonceLen]byte
	flags byte // the dialer's: flagProbe
	name  string
	id    string
	inc   uint64 // the node's incarnation: its data directory's random id
}

// flagProbe marks a dialer that only asks how the node is (Probe) and
// does not want a link.
const flagProbe = 1

func newHello(name, id string) (hello, error) {
	h := hello{name: name, id: id}
	if len(name) > maxNameLen || len(id) > maxIDLen {
		return h, errors.New("node name or cluster id too long")
	}
	_, err := rand.Read(h.nonce[:])
	return h, err
}

// appendNameID appends u8 len + name, u8 len + id, u64 incarnation.
func appendNameID(b []byte, h hello) []byte {
	b = append(b, byte(len(h.name)))
	b = append(b, h.name...)
	b = append(b, byte(len(h.id)))
	b = append(b, h.id...)
	return binary.BigEndian.AppendUint64(b, h.inc)
}

// readNameID reads what appendNameID wrote.
func readNameID(r io.Reader, h *hello) error {
	var l [1]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return err
	}
	name := make([]byte, int(l[0])+1)
	if _, err := io.ReadFull(r, name); err != nil {
		return err
	}
	h.name = string(name[:len(name)-1])
	id := make([]byte, int(name[len(name)-1]))
	if _, err := io.ReadFull(r, id); err != nil {
		return err
	}
	h.id = string(id)
	var inc [8]byte
	if _, err := io.ReadFull(r, inc[:]); err != nil {
		return err
	}
	h.inc = binary.BigEndian.Uint64(inc[:])
	if h.name == "" {
		return errors.New("empty node name")
	}
	return nil
}

// writeHello writes the dialer's hello: magic, version, nonce, flags,
// name, id, incarnation.
func writeHello(w io.Writer, h hello) error {
	b := make([]byte, 0, 4+1+nonceLen+1+2+len(h.name)+len(h.id)+8)
	b = append(b, magic...)
	b = append(b, wireVersion)
	b = append(b, h.nonce[:]...)
	b = append(b, h.flags)
	_, err := w.Write(appendNameID(b, h))
	return err
}

// readPreamble reads magic, version and nonce.
func readPreamble(r io.Reader, h *hello) error {
	var pre [4 + 1 + nonceLen]byte
	if _, err := io.ReadFull(r, pre[:4]); err != nil {
		return err
	}
	if string(pre[:4]) != magic {
		return errors.New("not a warren cluster peer (bad magic)")
	}
	if _, err := io.ReadFull(r, pre[4:]); err != nil {
		return err
	}
	if pre[4] != wireVersion {
		return fmt.Errorf("unsupported transport version %d (this node speaks %d)", pre[4], wireVersion)
	}
	copy(h.nonce[:], pre[5:])
	return nil
}

// readHello reads the dialer's hello.
func readHello(r io.Reader) (hello, error) {
	var h hello
	if err := readPreamble(r, &h); err != nil {
		return h, err
	}
	var f [1]byte
	if _, err := io.ReadFull(r, f[:]); err != nil {
		return h, err
	}
	h.flags = f[0]
	err := readNameID(r, &h)
	return h, err
}

// proof is HMAC-SHA256(secret, role label, both hellos). The role label
// keeps one side's proof from being replayed as the other's; the fresh
// nonces keep an old proof from being replayed at all. The dialer's proof
// covers its own name and id and both nonces (it does not know the
// acceptor's name yet); the acceptor's covers everything.
func proof(secret []byte, role string, dialer, acceptor hello) []byte {
	m := hmac.New(sha256.New, secret)
	field := func(b []byte) {
		var l [2]byte
		binary.BigEndian.PutUint16(l[:], uint16(len(b)))
		m.Write(l[:])
		m.Write(b)
	}
	var inc [8]byte
	field([]byte("warren-transport-v2 " + role))
	field(dialer.nonce[:])
	field(acceptor.nonce[:])
	field([]byte{dialer.flags})
	field([]byte(dialer.name))
	field([]byte(dialer.id))
	field(binary.BigEndian.AppendUint64(inc[:0], dialer.inc))
	if role == "acceptor" {
		field([]byte(acceptor.name))
		field([]byte(acceptor.id))
		field(binary.BigEndian.AppendUint64(inc[:0], acceptor.inc))
	}
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

// errAuth is the refusal of a dialer that does not know the secret: all
// it is told, so that it learns nothing of the node it reached.
const errAuth = "authentication failed"

// dialHandshake runs the dialer's side:
//
//	dialer -> acceptor  "WRNT", version 2, 32-byte nonce, u8 flags,
//	                    u8 len + name, u8 len + cluster id, u64 incarnation
//	acceptor -> dialer  "WRNT", version 2, 32-byte nonce
//	dialer -> acceptor  HMAC-SHA256(secret, "dialer", nonces, the dialer's fields)
//	acceptor -> dialer  0x00, u8 len + name, u8 len + cluster id, u64 incarnation,
//	                    HMAC-SHA256(secret, "acceptor", nonces, both sides' fields)
//	                    or 0x01 + u16 len + refusal text
//
// The dialer's verdict on the acceptor (its check) is sent by verdict; the
// acceptor waits for it before it takes the link. It returns the
// acceptor's hello.
func dialHandshake(rw io.ReadWriter, secret []byte, me hello, want string) (hello, error) {
	if len(me.name) > maxNameLen || len(me.id) > maxIDLen {
		return hello{}, errors.New("node name or cluster id too long")
	}
	if _, err := rand.Read(me.nonce[:]); err != nil {
		return hello{}, err
	}
	if err := writeHello(rw, me); err != nil {
		return hello{}, err
	}
	var them hello
	if err := readPreamble(rw, &them); err != nil {
		return hello{}, err
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
		if err := readNameID(rw, &them); err != nil {
			return hello{}, err
		}
		got := make([]byte, sha256.Size)
		if _, err := io.ReadFull(rw, got); err != nil {
			return hello{}, err
		}
		if !hmac.Equal(got, proof(secret, "acceptor", me, them)) {
			return hello{}, errors.New("authentication failed: the peer does not know the cluster secret")
		}
	case statusRefused:
		reason, err := readReason(rw)
		if err != nil {
			return hello{}, err
		}
		return hello{}, &refusedError{reason}
	default:
		return hello{}, fmt.Errorf("bad handshake status %d", st[0])
	}
	if want != "" && them.name != want {
		return hello{}, fmt.Errorf("dialled %s but the node there is %s", want, them.name)
	}
	if err := idMismatch(me.name, me.id, them.name, them.id); err != nil {
		return hello{}, err
	}
	return them, nil
}

// verdict is the dialer's last word: 0x00 to take the link, or 0x01 + u16
// len + the reason it refuses the acceptor.
func verdict(w io.Writer, refuse error) error {
	if refuse == nil {
		_, err := w.Write([]byte{statusOK})
		return err
	}
	return writeRefusal(w, refuse.Error())
}

// readVerdict reads the dialer's verdict; a refusal is a *refusedError.
func readVerdict(r io.Reader) error {
	var st [1]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return err
	}
	switch st[0] {
	case statusOK:
		return nil
	case statusRefused:
		reason, err := readReason(r)
		if err != nil {
			return err
		}
		return &refusedError{reason}
	}
	return fmt.Errorf("bad handshake verdict %d", st[0])
}

func writeRefusal(w io.Writer, reason string) error {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := []byte{statusRefused, 0, 0}
	binary.BigEndian.PutUint16(b[1:], uint16(len(reason)))
	_, err := w.Write(append(b, reason...))
	return err
}

func readReason(r io.Reader) (string, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return "", err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n > maxReason {
		return "", errors.New("refused by peer")
	}
	reason := make([]byte, n)
	if _, err := io.ReadFull(r, reason); err != nil {
		return "", err
	}
	return string(reason), nil
}

// authError is the acceptor's error for a dialer without the secret; the
// dialer is told only errAuth.
type authError struct{ name string }

func (e *authError) Error() string {
	return fmt.Sprintf("%s: a client calling itself %q does not know the cluster secret", errAuth, e.name)
}

// acceptHandshake runs the acceptor's side. check, called once the dialer
// has proved the secret, may refuse the link (its error text is sent).
func acceptHandshake(rw io.ReadWriter, secret []byte, me hello, check func(hello) error) (hello, error) {
	them, err := readHello(rw)
	if err != nil {
		return hello{}, err
	}
	if _, err := rand.Read(me.nonce[:]); err != nil {
		return hello{}, err
	}
	pre := make([]byte, 0, 4+1+nonceLen)
	pre = append(pre, magic...)
	pre = append(pre, wireVersion)
	if _, err := rw.Write(append(pre, me.nonce[:]...)); err != nil {
		return hello{}, err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(rw, got); err != nil {
		return hello{}, err
	}
	var refuse error
	told := ""
	if !hmac.Equal(got, proof(secret, "dialer", them, me)) {
		refuse, told = &authError{them.name}, errAuth
	} else if err := idMismatch(me.name, me.id, them.name, them.id); err != nil {
		refuse = err
	} else if err := check(them); err != nil {
		refuse = err
	}
	if refuse != nil {
		reason := told
		if reason == "" {
			reason = refuse.Error()
		}
		writeRefusal(rw, reason)
		return hello{}, refuse
	}
	b := appendNameID([]byte{statusOK}, me)
	if _, err := rw.Write(append(b, proof(secret, "acceptor", them, me)...)); err != nil {
		return hello{}, err
	}
	return them, nil
}
