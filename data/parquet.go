package data

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// parquetReader streams one column of a Parquet file, row group by row
// group and page by page: only the pages of the column being read are in
// memory, never the whole file.
type parquetReader struct {
	name   string
	f      *os.File
	file   *parquet.File
	opt    *ReadOptions
	field  string
	col    int  // leaf column index
	list   bool // pre-tokenized: a repeated integer column
	kind   parquet.Kind
	report func(Problem) error
	hash   string

	rg       int // current row group
	pages    parquet.Pages
	rgRows   int64 // rows in the current row group
	rgDone   int64 // rows of it read
	row      int64 // rows of the file read
	values   parquet.ValueReader
	buf      []parquet.Value
	bi, bn   int  // buf[bi:bn] are unread
	pageDone bool // values has returned io.EOF
	reported int64
}

func openParquet(name string, opt *ReadOptions, report func(Problem) error) (fr fileReader, err error) {
	f, size, hash, err := openHashed(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	p := &parquetReader{name: name, f: f, opt: opt, field: opt.field(), report: report, hash: hash}
	if err := p.recover(func() error {
		var err error
		p.file, err = parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
		return err
	}); err != nil {
		return nil, fmt.Errorf("data: %s: not a readable Parquet file: %w", name, err)
	}
	if err := p.findColumn(); err != nil {
		return nil, err
	}
	p.buf = make([]parquet.Value, 256)
	return p, nil
}

// recover runs fn, turning a panic of the Parquet library on a corrupt file
// into an error.
func (p *parquetReader) recover(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("corrupt file (%v)", v)
		}
	}()
	return fn()
}

func (p *parquetReader) findColumn() error {
	schema := p.file.Schema()
	var leaves []parquet.LeafColumn
	var names []string
	for _, path := range schema.Columns() {
		names = append(names, strings.Join(path, "."))
		if path[0] == p.field {
			if lc, ok := schema.Lookup(path...); ok {
				leaves = append(leaves, lc)
			}
		}
	}
	if len(leaves) == 0 {
		return fmt.Errorf("data: %s: no column %q (columns: %s)", p.name, p.field, strings.Join(names, ", "))
	}
	lc := leaves[0]
	kind := lc.Node.Type().Kind()
	if p.opt.Pretokenized {
		if len(leaves) != 1 || lc.MaxRepetitionLevel != 1 || (kind != parquet.Int32 && kind != parquet.Int64) {
			return fmt.Errorf("data: %s: column %q is %s, want a list of INT32 or INT64", p.name, p.field, columnType(leaves))
		}
		p.list = true
	} else if len(leaves) != 1 || lc.MaxRepetitionLevel != 0 || kind != parquet.ByteArray {
		return fmt.Errorf("data: %s: column %q is %s, want a string (BYTE_ARRAY) column", p.name, p.field, columnType(leaves))
	}
	p.col, p.kind = lc.ColumnIndex, kind
	return nil
}

func columnType(leaves []parquet.LeafColumn) string {
	if len(leaves) != 1 {
		return "a group of several columns"
	}
	lc := leaves[0]
	typ := lc.Node.Type()
	s := typ.Kind().String()
	if logical := typ.String(); logical != s {
		s += " (" + logical + ")"
	}
	if lc.MaxRepetitionLevel > 0 {
		s = "a repeated " + s
	}
	return s
}

func (p *parquetReader) sum() string  { return p.hash }
func (p *parquetReader) close() error { return p.f.Close() }

func (p *parquetReader) next() (doc Document, err error) {
	err = p.recover(func() error {
		var err error
		doc, err = p.read()
		return err
	})
	if err != nil && err != io.EOF {
		var re *RecordError
		// A record's problem names its file and row already; read's
		// other errors (the library's, the file's shape) get both here.
		if !errors.As(err, &re) {
			err = fmt.Errorf("data: %s: row group %d: %w", p.name, p.rg+1, err)
		}
	}
	return doc, err
}

func (p *parquetReader) read() (Document, error) {
	groups := p.file.RowGroups()
	for {
		if p.pages == nil {
			if p.rg == len(groups) {
				p.progress(true)
				return Document{}, io.EOF
			}
			g := groups[p.rg]
			p.pages = g.ColumnChunks()[p.col].Pages()
			p.rgRows, p.rgDone = g.NumRows(), 0
			p.values, p.bi, p.bn = nil, 0, 0
		}
		v, err := p.value()
		if err == io.EOF {
			if p.rgDone != p.rgRows {
				return Document{}, fmt.Errorf("column %q has %d rows, want %d", p.field, p.rgDone, p.rgRows)
			}
			if err := p.pages.Close(); err != nil {
				return Document{}, err
			}
			p.pages = nil
			p.rg++
			p.progress(false)
			continue
		}
		if err != nil {
			return Document{}, err
		}
		if v.RepetitionLevel() != 0 {
			return Document{}, fmt.Errorf("column %q: a row does not start at repetition level 0", p.field)
		}
		p.rgDone++
		p.row++
		var doc Document
		var kind ProblemKind
		var detail string
		if p.list {
			doc.IDs, kind, detail, err = p.ids(v)
			if err != nil {
				return Document{}, err
			}
		} else {
			doc.Text, kind, detail = p.text(v)
		}
		if kind != "" {
			if err := p.report(Problem{Source: p.name, Line: p.row, Row: true, Kind: kind, Detail: detail}); err != nil {
				return Document{}, err
			}
			continue
		}
		doc.Source, doc.Line = p.name, p.row
		return doc, nil
	}
}

func (p *parquetReader) text(v parquet.Value) (string, ProblemKind, string) {
	if v.IsNull() {
		return "", NullValue, fmt.Sprintf("column %q is null", p.field)
	}
	b := v.ByteArray()
	if off := invalidUTF8(b); off >= 0 {
		return "", InvalidUTF8, fmt.Sprintf("column %q is not valid UTF-8 (byte %d)", p.field, off)
	}
	s := string(b)
	if isBlank(s) {
		return "", EmptyText, fmt.Sprintf("column %q is empty", p.field)
	}
	return s, "", ""
}

// ids collects the list that starts with v, reading ahead to the next row.
func (p *parquetReader) ids(v parquet.Value) ([]int32, ProblemKind, string, error) {
	var ids []int32
	var kind ProblemKind
	var detail string
	for i := 0; ; i++ {
		if kind == "" {
			switch {
			case v.IsNull() && i == 0 && !p.continues():
				kind, detail = EmptyText, fmt.Sprintf("column %q is an empty or null list", p.field)
			case v.IsNull():
				kind, detail = NullValue, fmt.Sprintf("element %d of %q is null", i, p.field)
			default:
				id := v.Int64()
				if p.kind == parquet.Int32 {
					id = int64(v.Int32())
				}
				switch {
				case id < 0 || id > math.MaxInt32:
					kind, detail = BadToken, fmt.Sprintf("element %d of %q: token id %d out of range", i, p.field, id)
				case p.opt.VocabSize > 0 && id >= int64(p.opt.VocabSize):
					kind, detail = BadToken, fmt.Sprintf("element %d of %q: token id %d outside the vocabulary [0, %d)", i, p.field, id, p.opt.VocabSize)
				default:
					ids = append(ids, int32(id))
				}
			}
		}
		if !p.continues() {
			break
		}
		var err error
		if v, err = p.value(); err != nil {
			return nil, "", "", err
		}
	}
	if kind != "" {
		return nil, kind, detail, nil
	}
	return ids, "", "", nil
}

// continues reports whether the next value of the row group continues the
// current row (a repetition level above 0).
func (p *parquetReader) continues() bool {
	if err := p.fill(); err != nil {
		return false
	}
	return p.bi < p.bn && p.buf[p.bi].RepetitionLevel() > 0
}

// value returns the next value of the current row group's column chunk, or
// io.EOF at its end.
func (p *parquetReader) value() (parquet.Value, error) {
	if err := p.fill(); err != nil {
		return parquet.Value{}, err
	}
	v := p.buf[p.bi]
	p.bi++
	return v, nil
}

// fill makes buf[bi:bn] non-empty, reading pages as needed, or returns
// io.EOF at the end of the column chunk.
func (p *parquetReader) fill() error {
	for p.bi == p.bn {
		if p.values == nil || p.pageDone {
			page, err := p.pages.ReadPage()
			if err != nil {
				return err
			}
			p.values, p.pageDone = page.Values(), false
		}
		n, err := p.values.ReadValues(p.buf)
		p.bi, p.bn = 0, n
		if err == io.EOF {
			p.pageDone = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// progress reports the bytes of the file read so far, in proportion to the
// rows read; at the end, all of it.
func (p *parquetReader) progress(end bool) {
	if p.opt.Progress == nil {
		return
	}
	size := p.file.Size()
	done := size
	if rows := p.file.NumRows(); !end && rows > 0 {
		done = int64(float64(size) * float64(p.row) / float64(rows))
	}
	if done > p.reported {
		p.opt.Progress(done - p.reported)
		p.reported = done
	}
}

// parquetChatReader reads the chat records of a Parquet file (see
// ParseChatRecord): a "messages" list of {role, content} groups, or
// "instruction", "input" and "output" string columns. Each row is
// reconstructed whole, made a JSON object and parsed as a JSONL record is,
// so that both formats take the same records and report the same problems.
type parquetChatReader struct {
	name   string
	f      *os.File
	size   int64
	r      *parquet.Reader
	opt    *ReadOptions
	report func(Problem) error
	hash   string
	row    int64
	done   bool
}

func openParquetChat(name string, opt *ReadOptions, report func(Problem) error) (fr fileReader, err error) {
	f, size, hash, err := openHashed(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	p := &parquetChatReader{name: name, f: f, size: size, opt: opt, report: report, hash: hash}
	err = recoverParquet(func() error {
		file, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
		if err != nil {
			return err
		}
		p.r = parquet.NewReader(file)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: %s: not a readable Parquet file: %w", name, err)
	}
	return p, nil
}

// recoverParquet runs fn, turning a panic of the Parquet library on a
// corrupt file into an error.
func recoverParquet(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("corrupt file (%v)", v)
		}
	}()
	return fn()
}

func (p *parquetChatReader) sum() string { return p.hash }
func (p *parquetChatReader) close() error {
	if p.r != nil {
		p.r.Close()
	}
	return p.f.Close()
}

func (p *parquetChatReader) next() (Document, error) {
	for {
		if p.done {
			return Document{}, io.EOF
		}
		row := map[string]any{}
		err := recoverParquet(func() error { return p.r.Read(&row) })
		if err == io.EOF {
			p.done = true
			if p.opt.Progress != nil {
				p.opt.Progress(p.size)
			}
			return Document{}, io.EOF
		}
		if err != nil {
			return Document{}, fmt.Errorf("data: %s: row %d: %w", p.name, p.row+1, err)
		}
		p.row++
		line, err := json.Marshal(row)
		var msgs []Message
		var kind ProblemKind
		var detail string
		if err != nil {
			kind, detail = WrongType, fmt.Sprintf("the row is not a chat record: %v", err)
		} else {
			msgs, kind, detail = ParseChatRecord(line)
		}
		if kind != "" {
			if err := p.report(Problem{Source: p.name, Line: p.row, Row: true, Kind: kind, Detail: detail}); err != nil {
				return Document{}, err
			}
			continue
		}
		return Document{Source: p.name, Line: p.row, Messages: msgs}, nil
	}
}

// openHashed opens a Parquet file and hashes it in one sequential pass
// (reading it proper then goes by row group and page), returning it with
// its size and SHA-256.
func openHashed(name string) (f *os.File, size int64, hash string, err error) {
	if f, err = inputfile.Open(name); err != nil {
		return nil, 0, "", fmt.Errorf("data: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, "", fmt.Errorf("data: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, 0, "", fmt.Errorf("data: %s: %w", name, err)
	}
	return f, st.Size(), hexSum(h), nil
}
