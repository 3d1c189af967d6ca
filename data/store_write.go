package data

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/atomicfile"
)

// A StoreWriter writes a dataset folder. The documents go to a temporary
// folder beside it, which Commit completes and renames into place, so that
// the dataset appears whole or not at all.
type StoreWriter struct {
	dir, tmp  string
	m         Manifest
	f         *os.File
	w         *bufio.Writer
	mf        *os.File // mask.bin, for a chat dataset (Settings.Chat)
	mw        *bufio.Writer
	lock      *os.File // tempLockFile in tmp, locked while the writer writes
	mask      []uint8  // the mask of every token, kept for the counts
	tokens    int64
	recs      []record
	srcIndex  map[string]uint32
	srcNames  []string
	threshold uint64 // held out: hash < threshold
	all       bool   // Holdout == 1
	buf       []byte
	err       error // sticky
}

// CreateStore starts a dataset in dir, which must not exist or be an empty
// folder, for tokens of the tokenizer tok made with the given settings (whose
// PadID it sets).
func CreateStore(dir string, tok TokenizerInfo, set Settings) (*StoreWriter, error) {
	if err := set.check(); err != nil {
		return nil, err
	}
	switch {
	case tok.VocabSize <= 0 || tok.VocabSize > math.MaxInt32:
		return nil, fmt.Errorf("data: vocabulary size %d out of range", tok.VocabSize)
	case set.BOS && tok.BOS < 0:
		return nil, errors.New("data: the tokenizer has no BOS token")
	case set.EOS && tok.EOS < 0:
		return nil, errors.New("data: the tokenizer has no EOS token")
	}
	set.PadID = 0
	if tok.EOS >= 0 {
		set.PadID = tok.EOS
	}
	if err := checkEmptyDir(dir); err != nil {
		return nil, err
	}
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	// A writer killed before it committed or aborted left its temporary
	// folder: those of this dataset that no live writer holds go first.
	removeStaleTemps(parent, base)
	tmp, err := atomicfile.TempDir(parent, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	lock, err := lockTemp(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("data: %w", err)
	}
	f, err := os.Create(filepath.Join(tmp, TokensFile))
	if err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("data: %w", err)
	}
	version := StoreVersion
	var mf *os.File
	if set.Chat != nil {
		version = MaskedVersion
		if mf, err = os.Create(filepath.Join(tmp, MaskFile)); err != nil {
			f.Close()
			lock.Close()
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("data: %w", err)
		}
	}
	w := &StoreWriter{
		dir: dir, tmp: tmp, lock: lock, f: f, w: bufio.NewWriterSize(f, 1<<20),
		srcIndex: map[string]uint32{},
		m: Manifest{
			Format: manifestFormat, Version: version, DType: "uint32",
			Tokenizer: tok, Settings: set,
		},
	}
	if mf != nil {
		w.mf, w.mw = mf, bufio.NewWriterSize(mf, 1<<18)
		if _, err := w.mw.Write(maskHeader(0)); err != nil {
			w.Abort()
			return nil, fmt.Errorf("data: %w", err)
		}
	}
	w.all = set.Holdout >= 1
	w.threshold = uint64(math.Ldexp(set.Holdout, 64)) // < 2⁶⁴ when Holdout < 1
	// The header is written again, with the counts, by Commit.
	if _, err := w.w.Write(tokensHeader(0, 0)); err != nil {
		w.Abort()
		return nil, fmt.Errorf("data: %w", err)
	}
	return w, nil
}

func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("data: %s already exists and is not empty: give a new folder, or remove it first", dir)
	}
	return nil
}

// heldOut reports whether a document goes to the holdout split (see
// Settings.Holdout).
func heldOut(doc *Document, seed uint64, threshold uint64, all bool) bool {
	if doc.Split != "" {
		return doc.Split == Holdout
	}
	if all {
		return true
	}
	if threshold == 0 {
		return false
	}
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	if doc.Text != "" {
		io.WriteString(h, doc.Text)
	} else {
		buf := make([]byte, 4*len(doc.IDs))
		for i, id := range doc.IDs {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
		h.Write(buf)
	}
	return binary.BigEndian.Uint64(h.Sum(nil)) < threshold
}

// Add appends a document: doc.IDs, between the BOS and EOS tokens if the
// settings ask for them. doc.Split, or else doc.Text, decides the split
// (see Settings.Holdout); doc.Source and doc.Line are recorded. A chat
// dataset's documents have their loss mask, doc.Mask, a 0 or 1 per id (BOS
// gets 0 and EOS 1); other datasets' have none. It returns the document's
// id, its index in the dataset.
func (w *StoreWriter) Add(doc Document) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	set := &w.m.Settings
	n := len(doc.IDs)
	if set.BOS {
		n++
	}
	if set.EOS {
		n++
	}
	where := Problem{Source: doc.Source, Line: doc.Line}.Where()
	if n == 0 {
		return 0, fmt.Errorf("data: %s: empty document", where)
	}
	if int64(n) > math.MaxUint32 {
		return 0, fmt.Errorf("data: %s: document of %d tokens is too long", where, n)
	}
	vocab := int32(w.m.Tokenizer.VocabSize)
	for i, id := range doc.IDs {
		if id < 0 || id >= vocab {
			return 0, fmt.Errorf("data: %s: token %d (id %d) outside the vocabulary [0, %d)", where, i, id, vocab)
		}
	}
	if len(w.recs) >= math.MaxInt32 {
		return 0, errors.New("data: too many documents")
	}
	switch {
	case w.mw == nil && doc.Mask != nil:
		return 0, fmt.Errorf("data: %s: a loss mask, but the dataset is not a chat dataset (settings.chat)", where)
	case w.mw != nil && len(doc.Mask) != len(doc.IDs):
		return 0, fmt.Errorf("data: %s: loss mask of %d tokens for %d ids", where, len(doc.Mask), len(doc.IDs))
	}
	for i, b := range doc.Mask {
		if b > 1 {
			return 0, fmt.Errorf("data: %s: loss mask value %d at token %d, want 0 or 1", where, b, i)
		}
	}
	w.buf = w.buf[:0]
	if set.BOS {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(w.m.Tokenizer.BOS))
	}
	for _, id := range doc.IDs {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(id))
	}
	if set.EOS {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(w.m.Tokenizer.EOS))
	}
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = fmt.Errorf("data: %w", err)
		return 0, w.err
	}
	if w.mw != nil {
		start := len(w.mask)
		if set.BOS {
			w.mask = append(w.mask, 0)
		}
		w.mask = append(w.mask, doc.Mask...)
		if set.EOS {
			w.mask = append(w.mask, 1)
		}
		if _, err := w.mw.Write(w.mask[start:]); err != nil {
			w.err = fmt.Errorf("data: %w", err)
			return 0, w.err
		}
	}
	src, ok := w.srcIndex[doc.Source]
	if !ok {
		src = uint32(len(w.srcNames))
		w.srcIndex[doc.Source] = src
		w.srcNames = append(w.srcNames, doc.Source)
	}
	r := record{offset: w.tokens, length: uint32(n), source: src, line: doc.Line}
	if heldOut(&doc, set.Seed, w.threshold, w.all) {
		r.split = 1
	}
	w.recs = append(w.recs, r)
	w.tokens += int64(n)
	return len(w.recs) - 1, nil
}

// Commit completes the dataset: it writes the token header, index.bin and
// manifest.json, with the sources (their order and details; sources of
// added documents missing from it are appended) and the problems met in
// reading, syncs them and renames the folder into place. It returns the
// manifest.
func (w *StoreWriter) Commit(sources []Source, problems *Problems) (*Manifest, error) {
	if w.err != nil {
		w.Abort()
		return nil, w.err
	}
	m, err := w.commit(sources, problems)
	if err != nil {
		w.Abort()
		w.err = err
		return nil, err
	}
	w.err = errors.New("data: store already committed")
	return m, nil
}

func (w *StoreWriter) commit(sources []Source, problems *Problems) (*Manifest, error) {
	m := &w.m
	// Sources: the reader's list, then any others, and the records remapped.
	m.Sources = append([]Source(nil), sources...)
	index := map[string]uint32{}
	for i, s := range m.Sources {
		if _, ok := index[s.Path]; !ok {
			index[s.Path] = uint32(i)
		}
	}
	remap := make([]uint32, len(w.srcNames))
	for i, name := range w.srcNames {
		j, ok := index[name]
		if !ok {
			j = uint32(len(m.Sources))
			index[name] = j
			m.Sources = append(m.Sources, Source{Path: name})
		}
		remap[i] = j
	}
	for i := range w.recs {
		w.recs[i].source = remap[w.recs[i].source]
	}
	if problems != nil {
		m.Problems = Problems{Counts: problems.Counts, Examples: problems.Examples}
	}
	if m.Problems.Counts == nil {
		m.Problems.Counts = map[ProblemKind]int64{}
	}
	if m.Problems.Examples == nil {
		m.Problems.Examples = []Problem{}
	}

	// tokens.bin: the header with the counts, then a checksum of what is
	// on disk.
	if err := w.w.Flush(); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if _, err := w.f.WriteAt(tokensHeader(w.tokens, int64(len(w.recs))), 0); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	h := sha256.New()
	size, err := io.Copy(h, w.f)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	w.f = nil
	if m.Files == nil {
		m.Files = map[string]FileInfo{}
	}
	m.Files[TokensFile] = FileInfo{Bytes: size, SHA256: hexSum(h)}
	if w.mw != nil {
		fi, err := w.commitMask()
		if err != nil {
			return nil, err
		}
		m.Files[MaskFile] = fi
	}

	idx := indexBytes(w.recs, w.tokens)
	if err := writeSynced(filepath.Join(w.tmp, IndexFile), idx); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(idx)
	m.Files[IndexFile] = FileInfo{Bytes: int64(len(idx)), SHA256: hex.EncodeToString(sum[:])}

	v := views(w.recs, m.Settings, w.mask)
	m.Counts = Counts{}
	for i, s := range []*SplitInfo{&m.Splits.Train, &m.Splits.Holdout} {
		*s = SplitInfo{Counts: v[i].counts, DocIDs: docRanges(v[i].docs)}
		m.Counts.add(v[i].counts)
	}
	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if err := writeSynced(filepath.Join(w.tmp, ManifestFile), append(js, '\n')); err != nil {
		return nil, err
	}
	// The lock file is no part of the dataset: it goes before the folder
	// is synced and renamed (its lock held until the rename is done).
	if err := os.Remove(filepath.Join(w.tmp, tempLockFile)); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if err := atomicfile.SyncDir(w.tmp); err != nil {
		return nil, err
	}
	// Into place: an empty folder there is replaced.
	if err := checkEmptyDir(w.dir); err != nil {
		return nil, err
	}
	if err := os.Remove(w.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("data: %w", err)
	}
	if err := os.Rename(w.tmp, w.dir); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	w.tmp = ""
	w.lock.Close()
	w.lock = nil
	parent := filepath.Dir(filepath.Clean(w.dir))
	if err := atomicfile.SyncDir(parent); err != nil {
		return nil, err
	}
	out := *m
	return &out, nil
}

// AddTokenizer stores the tokenizer's files in the dataset
// (tokenizer.json, which must be the one the tokens were made with, and
// tokenizer_config.json when given), so that the dataset decodes its own
// tokens: Store.Tokenizer. Each is listed with its checksum.
func (w *StoreWriter) AddTokenizer(files map[string][]byte) error {
	if w.err != nil {
		return w.err
	}
	tj, ok := files[tokenizer.FileName]
	if !ok {
		return fmt.Errorf("data: no %s to store in the dataset", tokenizer.FileName)
	}
	if sum := sha256.Sum256(tj); hex.EncodeToString(sum[:]) != w.m.Tokenizer.SHA256 {
		return fmt.Errorf("data: %s is not the dataset's tokenizer (sha256 %x, the dataset's %s)", tokenizer.FileName, sum, w.m.Tokenizer.SHA256)
	}
	for _, name := range []string{tokenizer.FileName, tokenizer.ConfigFileName} {
		b, ok := files[name]
		if !ok {
			continue
		}
		if err := writeSynced(filepath.Join(w.tmp, name), b); err != nil {
			w.err = err
			return err
		}
		sum := sha256.Sum256(b)
		if w.m.Files == nil {
			w.m.Files = map[string]FileInfo{}
		}
		w.m.Files[name] = FileInfo{Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	return nil
}

// commitMask completes mask.bin: its header, a sync and its checksum.
func (w *StoreWriter) commitMask() (FileInfo, error) {
	if err := w.mw.Flush(); err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	if _, err := w.mf.WriteAt(maskHeader(w.tokens), 0); err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	if err := w.mf.Sync(); err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	if _, err := w.mf.Seek(0, io.SeekStart); err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	h := sha256.New()
	size, err := io.Copy(h, w.mf)
	if err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	if err := w.mf.Close(); err != nil {
		return FileInfo{}, fmt.Errorf("data: %w", err)
	}
	w.mf = nil
	return FileInfo{Bytes: size, SHA256: hexSum(h)}, nil
}

// Abort discards the dataset being written.
func (w *StoreWriter) Abort() error {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if w.mf != nil {
		w.mf.Close()
		w.mf = nil
	}
	if w.err == nil {
		w.err = errors.New("data: store aborted")
	}
	if w.tmp == "" {
		return nil
	}
	err := os.RemoveAll(w.tmp)
	w.tmp = ""
	if w.lock != nil {
		w.lock.Close()
		w.lock = nil
	}
	return err
}

// tempLockFile is the lock file in a dataset's temporary folder: a writer
// holds an advisory lock on it (flock, released by the kernel however
// the writer ends) from the folder's making to its rename, so that a
// later writer of the same dataset tells a live writer's temporary folder
// from one that a killed writer left behind.
const tempLockFile = ".writer.lock"

// lockTemp creates and locks the lock file of the temporary folder tmp.
func lockTemp(tmp string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(tmp, tempLockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if held, err := tryLock(f); err != nil && !errors.Is(err, errNoLocks) || held {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is locked by another process", f.Name())
		}
		return nil, err
	}
	return f, nil
}

// staleAge is how old a temporary folder without a lock file must be to
// be stale: a live writer locks its folder at once; older releases did
// not lock theirs.
const staleAge = time.Minute

// removeStaleTemps removes, from the folder parent, the temporary folders
// of the dataset base that their writers left (killed before they
// committed or aborted): only folders named as CreateStore names them,
// .BASE.tmp-DIGITS, and only those whose lock no live process holds (or,
// without a lock file, older than staleAge). Where locks cannot be taken
// it removes nothing. A folder it cannot read or remove stays.
func removeStaleTemps(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	prefix := "." + base + ".tmp-"
	for _, e := range entries {
		name := e.Name()
		digits := strings.TrimPrefix(name, prefix)
		if !e.IsDir() || len(digits) == len(name) || digits == "" || strings.Trim(digits, "0123456789") != "" {
			continue // not a folder (a link is not one), or not a temporary's name
		}
		path := filepath.Join(parent, name)
		if !staleTemp(path) {
			continue
		}
		os.RemoveAll(path)
	}
}

// staleTemp says whether the temporary folder path is no live writer's.
func staleTemp(path string) bool {
	f, err := os.OpenFile(filepath.Join(path, tempLockFile), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		fi, err := os.Lstat(path)
		return err == nil && time.Since(fi.ModTime()) > staleAge
	}
	if err != nil {
		return false
	}
	defer f.Close() // releases the lock taken
	held, err := tryLock(f)
	return err == nil && !held
}

// writeSynced creates the file at path with data and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("data: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("data: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}
