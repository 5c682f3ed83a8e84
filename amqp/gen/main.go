// Command gen generates amqp/spec.go from an AMQP 0-9-1 spec XML file
// (RabbitMQ's amqp0-9-1.stripped.extended.xml).
//
// Usage (see the go:generate directive in amqp/generate.go):
//
//	go run ./gen -spec /usr/share/amqp/specs/0-9-1-rabbit/amqp0-9-1.stripped.extended.xml -out spec.go
//
// The methods in rabbitmq-extensions.xml (embedded) are merged into the spec
// when the spec does not define them: the packaged XML lacks
// connection.blocked, connection.unblocked and connection.update-secret(-ok),
// which RabbitMQ implements.
//
// Field domains are resolved through the spec's <domain> elements down to
// the primitive AMQP types, which map to Go types as follows:
//
//	octet uint8   short uint16   long uint32   longlong uint64
//	bit bool      shortstr string longstr string
//	timestamp time.Time          table Table
//
// Consecutive bit fields are packed into one octet, least significant bit
// first. Reserved fields get no struct field: they are written as zero
// values and skipped when decoding.
package main

import (
	"bytes"
	_ "embed"
	"encoding/xml"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"sort"
	"strings"
)

//go:embed rabbitmq-extensions.xml
var extensionsXML []byte

type spec struct {
	Domains []domain `xml:"domain"`
	Classes []class  `xml:"class"`
}

type domain struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
}

type class struct {
	Name    string   `xml:"name,attr"`
	Index   int      `xml:"index,attr"`
	Methods []method `xml:"method"`
}

type method struct {
	Name     string  `xml:"name,attr"`
	Index    int     `xml:"index,attr"`
	Content  int     `xml:"content,attr"`
	Sync     int     `xml:"synchronous,attr"`
	Fields   []field `xml:"field"`
	extended bool
}

type field struct {
	Name     string `xml:"name,attr"`
	Domain   string `xml:"domain,attr"`
	Type     string `xml:"type,attr"`
	Reserved int    `xml:"reserved,attr"`
}

// resolved field
type rfield struct {
	wire     string // primitive AMQP type
	goName   string // "" for reserved fields
	specName string
}

var primitives = map[string]string{
	"octet":     "uint8",
	"short":     "uint16",
	"long":      "uint32",
	"longlong":  "uint64",
	"bit":       "bool",
	"shortstr":  "string",
	"longstr":   "string",
	"timestamp": "time.Time",
	"table":     "Table",
}

// initialisms are spelled in capitals in Go names.
var initialisms = map[string]string{"id": "ID", "ttl": "TTL", "url": "URL"}

// fieldNames overrides Go names of spec fields, by "class.method.field" or
// "field". The close methods' class-id and method-id would collide with
// the ClassID and MethodID methods of the Method interface.
var fieldNames = map[string]string{
	"nowait":                     "NoWait",
	"connection.close.class-id":  "FailingClassID",
	"connection.close.method-id": "FailingMethodID",
	"channel.close.class-id":     "FailingClassID",
	"channel.close.method-id":    "FailingMethodID",
}

func goName(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "-") {
		if p == "" {
			continue
		}
		if v, ok := initialisms[p]; ok {
			b.WriteString(v)
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("gen: ")
	specPath := flag.String("spec", "", "spec XML file")
	out := flag.String("out", "spec.go", "output Go file")
	noExt := flag.Bool("no-ext", false, "do not merge the embedded RabbitMQ extensions")
	flag.Parse()
	if *specPath == "" {
		log.Fatal("-spec is required")
	}
	raw, err := os.ReadFile(*specPath)
	if err != nil {
		log.Fatal(err)
	}
	var s spec
	if err := xml.Unmarshal(raw, &s); err != nil {
		log.Fatalf("%s: %v", *specPath, err)
	}
	if !*noExt {
		var ext spec
		if err := xml.Unmarshal(extensionsXML, &ext); err != nil {
			log.Fatalf("extensions: %v", err)
		}
		merge(&s, &ext)
	}
	src, err := generate(&s)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

func merge(s, ext *spec) {
	s.Domains = append(s.Domains, ext.Domains...)
	for _, ec := range ext.Classes {
		ci := -1
		for i := range s.Classes {
			if s.Classes[i].Index == ec.Index {
				ci = i
			}
		}
		if ci < 0 {
			s.Classes = append(s.Classes, ec)
			continue
		}
	next:
		for _, em := range ec.Methods {
			for _, m := range s.Classes[ci].Methods {
				if m.Index == em.Index {
					continue next
				}
			}
			em.extended = true
			s.Classes[ci].Methods = append(s.Classes[ci].Methods, em)
		}
	}
}

func resolve(domains map[string]string, f field) (string, error) {
	t := f.Type
	if t == "" {
		t = f.Domain
	}
	for i := 0; i < 16; i++ {
		if _, ok := primitives[t]; ok {
			return t, nil
		}
		next, ok := domains[t]
		if !ok {
			return "", fmt.Errorf("field %s: unknown domain %q", f.Name, t)
		}
		t = next
	}
	return "", fmt.Errorf("field %s: domain loop at %q", f.Name, t)
}

type gmethod struct {
	class, cname string
	cindex       int
	m            method
	goType       string
	fields       []rfield
}

func generate(s *spec) ([]byte, error) {
	domains := map[string]string{}
	for _, d := range s.Domains {
		if d.Name != d.Type {
			domains[d.Name] = d.Type
		}
	}
	sort.SliceStable(s.Classes, func(i, j int) bool { return s.Classes[i].Index < s.Classes[j].Index })
	var all []gmethod
	for _, c := range s.Classes {
		ms := append([]method(nil), c.Methods...)
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].Index < ms[j].Index })
		for _, m := range ms {
			g := gmethod{class: c.Name, cname: goName(c.Name), cindex: c.Index, m: m}
			g.goType = g.cname + goName(m.Name)
			for _, f := range m.Fields {
				w, err := resolve(domains, f)
				if err != nil {
					return nil, fmt.Errorf("%s.%s: %v", c.Name, m.Name, err)
				}
				rf := rfield{wire: w, specName: f.Name}
				if f.Reserved == 0 {
					rf.goName = goName(f.Name)
					if v, ok := fieldNames[f.Name]; ok {
						rf.goName = v
					}
					if v, ok := fieldNames[c.Name+"."+m.Name+"."+f.Name]; ok {
						rf.goName = v
					}
				}
				g.fields = append(g.fields, rf)
			}
			all = append(all, g)
		}
	}

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("// Code generated by amqp/gen; DO NOT EDIT.\n\n")
	p("package amqp\n\n")
	usesTime := false
	for _, g := range all {
		for _, f := range g.fields {
			if f.wire == "timestamp" {
				usesTime = true
			}
		}
	}
	if usesTime {
		p("import \"time\"\n\n")
	}
	p("// Class ids.\nconst (\n")
	for _, c := range s.Classes {
		p("Class%s = %d\n", goName(c.Name), c.Index)
	}
	p(")\n\n")

	for _, g := range all {
		name := g.class + "." + g.m.Name
		p("// %s is %s (class %d, method %d)", g.goType, name, g.cindex, g.m.Index)
		var notes []string
		if g.m.Sync == 1 {
			notes = append(notes, "synchronous")
		}
		if g.m.Content == 1 {
			notes = append(notes, "carries content")
		}
		if g.m.extended {
			notes = append(notes, "RabbitMQ extension")
		}
		if len(notes) > 0 {
			p("; %s", strings.Join(notes, ", "))
		}
		p(".\n")
		p("type %s struct {\n", g.goType)
		for _, f := range g.fields {
			if f.goName == "" {
				continue
			}
			p("%s %s // %s %s\n", f.goName, primitives[f.wire], f.specName, f.wire)
		}
		p("}\n\n")
		p("func (*%s) ClassID() uint16 { return %d }\n", g.goType, g.cindex)
		p("func (*%s) MethodID() uint16 { return %d }\n", g.goType, g.m.Index)
		p("func (*%s) Name() string { return %q }\n", g.goType, name)
		p("func (*%s) HasContent() bool { return %v }\n\n", g.goType, g.m.Content == 1)

		// Decode
		recv := "m"
		if len(g.fields) == 0 {
			p("// Decode decodes the method's arguments (there are none).\n")
			p("func (*%s) Decode(args []byte) error {\n", g.goType)
			p("if len(args) != 0 { return decodeError(%d, %d, args) }\n", g.cindex, g.m.Index)
			p("return nil\n}\n\n")
		} else {
			p("// Decode decodes the method's arguments, args being the payload after\n// the class and method ids.\n")
			p("func (%s *%s) Decode(args []byte) error {\n", recv, g.goType)
			p("d := decoder{b: args}\n")
			for i := 0; i < len(g.fields); {
				f := g.fields[i]
				if f.wire == "bit" {
					j := i
					for j < len(g.fields) && g.fields[j].wire == "bit" && j-i < 8 {
						j++
					}
					anyNamed := false
					for _, bf := range g.fields[i:j] {
						anyNamed = anyNamed || bf.goName != ""
					}
					if !anyNamed {
						p("d.octet()\n")
					} else {
						p("{\nbits := d.octet()\n")
						for k, bf := range g.fields[i:j] {
							if bf.goName != "" {
								p("m.%s = bits&%d != 0\n", bf.goName, 1<<k)
							}
						}
						p("}\n")
					}
					i = j
					continue
				}
				// RabbitMQ checks that every shortstr of a method
				// without content is UTF-8 (the methods with content,
				// basic.publish and the ones the server sends with a
				// message, are not checked).
				wire := f.wire
				if wire == "shortstr" && g.m.Content != 1 {
					wire = "shortstrUTF8"
				}
				if f.goName == "" {
					switch f.wire {
					case "shortstr":
						p("d.skip%s()\n", goName(wire))
					case "longstr":
						p("d.skipLongstr()\n")
					default:
						p("d.%s()\n", f.wire)
					}
				} else {
					p("m.%s = d.%s()\n", f.goName, wire)
				}
				i++
			}
			p("return d.finish(%d, %d, args)\n}\n\n", g.cindex, g.m.Index)
		}

		// Append
		p("// Append appends the class id, method id and arguments to dst.\n")
		if len(g.fields) == 0 {
			p("func (*%s) Append(dst []byte) []byte {\n", g.goType)
		} else {
			p("func (m *%s) Append(dst []byte) []byte {\n", g.goType)
		}
		p("dst = append(dst, %d, %d, %d, %d)\n", g.cindex>>8, g.cindex&0xff, g.m.Index>>8, g.m.Index&0xff)
		for i := 0; i < len(g.fields); {
			f := g.fields[i]
			if f.wire == "bit" {
				j := i
				for j < len(g.fields) && g.fields[j].wire == "bit" && j-i < 8 {
					j++
				}
				named := 0
				for _, bf := range g.fields[i:j] {
					if bf.goName != "" {
						named++
					}
				}
				if named == 0 {
					p("dst = append(dst, 0)\n")
				} else {
					p("{\nvar bits uint8\n")
					for k, bf := range g.fields[i:j] {
						if bf.goName != "" {
							p("if m.%s { bits |= %d }\n", bf.goName, 1<<k)
						}
					}
					p("dst = append(dst, bits)\n}\n")
				}
				i = j
				continue
			}
			if f.goName == "" {
				switch f.wire {
				case "octet":
					p("dst = append(dst, 0)\n")
				case "short":
					p("dst = append(dst, 0, 0)\n")
				case "long", "table":
					p("dst = append(dst, 0, 0, 0, 0)\n")
				case "shortstr":
					p("dst = append(dst, 0)\n")
				case "longstr":
					p("dst = append(dst, 0, 0, 0, 0)\n")
				case "longlong", "timestamp":
					p("dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)\n")
				}
			} else {
				p("dst = append%s(dst, m.%s)\n", goName(f.wire), f.goName)
			}
			i++
		}
		p("return dst\n}\n\n")
	}

	p("// NewMethod returns a new zero method for the class and method ids, or\n// nil when there is no such method.\n")
	p("func NewMethod(classID, methodID uint16) Method {\n")
	p("switch uint32(classID)<<16 | uint32(methodID) {\n")
	for _, g := range all {
		p("case %d<<16 | %d:\nreturn new(%s)\n", g.cindex, g.m.Index, g.goType)
	}
	p("}\nreturn nil\n}\n\n")

	p("// MethodName returns the spec name of a method, \"basic.publish\", or \"\"\n// when there is no such method.\n")
	p("func MethodName(classID, methodID uint16) string {\n")
	p("switch uint32(classID)<<16 | uint32(methodID) {\n")
	for _, g := range all {
		p("case %d<<16 | %d:\nreturn %q\n", g.cindex, g.m.Index, g.class+"."+g.m.Name)
	}
	p("}\nreturn \"\"\n}\n")

	src, err := format.Source(b.Bytes())
	if err != nil {
		return b.Bytes(), fmt.Errorf("formatting generated code: %v", err)
	}
	return src, nil
}
