package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// DefaultWorkers is how many files a download fetches at once.
const DefaultWorkers = 4

// ErrNothingSelected is wrapped by the error of a selection that takes no
// file, or, by default, no safetensors weights.
var ErrNothingSelected = errors.New("nothing to download")

// Options selects what a download takes from a repo.
type Options struct {
	// Revision is a branch, a tag or a commit; "" is DefaultRevision.
	Revision string
	// Files are repo paths to take, each of which must exist. Without
	// them, a download takes what a fine-tune reads (DefaultSelection).
	Files []string
	// Include are globs of paths to take besides those.
	Include []string
	// Exclude are globs of paths to leave out of Include's and the
	// default's (not out of Files).
	Exclude []string
}

// The globs are fnmatch's, as huggingface_hub's allow_patterns: '*' and
// '?' match any character, '/' too, [abc] and [!abc] one of a set; a glob
// ending in '/' takes the folder's files.

// DefaultSelection says whether a download takes p when told nothing:
// the files at the repo's top that a fine-tune reads — the configuration,
// the tokenizer's files and the safetensors weights with their index —
// and not Mistral's consolidated*.safetensors, which repeat the weights
// in another layout, nor PyTorch, GGUF or original/ checkpoints.
func DefaultSelection(p string) bool {
	switch p {
	case "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "model.safetensors.index.json":
		return true
	}
	return !strings.Contains(p, "/") && strings.HasSuffix(p, ".safetensors") && !strings.HasPrefix(p, "consolidated")
}

// Plan is what a download of a repo at a revision takes: the commit the
// revision names, the files selected, and of those the ones the cache
// does not hold yet.
type Plan struct {
	Repo, Revision, Commit string
	Files                  []Sibling // selected, by path
	Fetch                  []Sibling // of Files, those to fetch
	cache                  Cache
}

// Bytes is the size of the files to fetch, a blob that several paths
// share counted once, as it is fetched.
func (p *Plan) Bytes() int64 {
	var n int64
	seen := map[string]bool{}
	for _, f := range p.Fetch {
		if e := f.Etag(); e == "" || !seen[e] {
			seen[e] = true
			n += f.Size
		}
	}
	return n
}

// Snapshot is the folder the files will be in (or are, once Download
// returns): usable as a checkpoint folder.
func (p *Plan) Snapshot() string { return p.cache.SnapshotDir(p.Repo, p.Commit) }

// Plan asks the Hub for repo's files at opt.Revision, selects those opt
// takes, and looks each up in cache: a file whose snapshot entry or blob
// is there is not fetched again (its entry is linked when only its blob
// is), whoever downloaded it.
func (c *Client) Plan(ctx context.Context, cache Cache, repo string, opt Options) (*Plan, error) {
	rev := opt.Revision
	if rev == "" {
		rev = DefaultRevision
	}
	info, err := c.RepoInfo(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	files, err := Select(info.Siblings, opt)
	if err != nil {
		var nf *NotFoundError
		if errors.As(err, &nf) {
			nf.Repo, nf.Revision = repo, rev
			return nil, err
		}
		return nil, fmt.Errorf("hub: %s at %s: %w", repo, rev, err)
	}
	p := &Plan{Repo: repo, Revision: rev, Commit: info.SHA, Files: files, cache: cache}
	for _, f := range files {
		has, err := cache.has(repo, info.SHA, f)
		if err != nil {
			return nil, err
		}
		if !has {
			p.Fetch = append(p.Fetch, f)
		}
	}
	return p, nil
}

// Select returns the files of list that opt takes, by path. A file of
// opt.Files that list lacks is a *NotFoundError; a selection of nothing,
// or a default selection without weights, wraps ErrNothingSelected.
func Select(list []Sibling, opt Options) ([]Sibling, error) {
	include, err := compileGlobs(opt.Include)
	if err != nil {
		return nil, err
	}
	exclude, err := compileGlobs(opt.Exclude)
	if err != nil {
		return nil, err
	}
	named := make(map[string]bool, len(opt.Files))
	for _, f := range opt.Files {
		named[f] = true
	}
	byDefault := len(opt.Files) == 0
	var out []Sibling
	weights := false
	for _, s := range list {
		take := named[s.Path] || (byDefault && DefaultSelection(s.Path) || matchAny(include, s.Path)) && !matchAny(exclude, s.Path)
		delete(named, s.Path)
		if take {
			out = append(out, s)
			weights = weights || strings.HasSuffix(s.Path, ".safetensors")
		}
	}
	for _, f := range opt.Files {
		if named[f] {
			return nil, &NotFoundError{File: f, What: "file"}
		}
	}
	if len(out) == 0 || byDefault && len(opt.Include) == 0 && !weights {
		names := make([]string, 0, len(list))
		for _, s := range list {
			names = append(names, s.Path)
		}
		sort.Strings(names)
		if len(names) > 12 {
			names = append(names[:12], fmt.Sprintf("and %d more", len(names)-12))
		}
		what := "no file is selected"
		if len(out) > 0 {
			what = "the default selection has no safetensors weights, the only ones memtrain reads"
		}
		return nil, fmt.Errorf("%w: %s (the repo's files: %s)", ErrNothingSelected, what, strings.Join(names, ", "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Download fetches the plan's files, workers at a time (DefaultWorkers
// when < 1), one fetch a blob however many paths share it, and records
// the revision's commit in refs/ once all are in: a failed download never
// moves a ref to an incomplete snapshot. progress, when not nil, gets the
// bytes written as they come, one call at a time. The first error stops
// the other files (a partial one stays, for the next download to resume).
func (c *Client) Download(ctx context.Context, p *Plan, workers int, progress func(int64)) error {
	if workers < 1 {
		workers = DefaultWorkers
	}
	var mu sync.Mutex
	report := func(n int64) {
		if progress != nil {
			mu.Lock()
			progress(n)
			mu.Unlock()
		}
	}
	var groups [][]Sibling
	at := map[string]int{}
	for _, f := range p.Fetch {
		if i, ok := at[f.Etag()]; ok && f.Etag() != "" {
			groups[i] = append(groups[i], f)
			continue
		}
		at[f.Etag()] = len(groups)
		groups = append(groups, []Sibling{f})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var first error
	var once sync.Once
	jobs := make(chan []Sibling)
	var wg sync.WaitGroup
	for range min(workers, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range jobs {
				err := c.fetch(ctx, p.cache, target{repo: p.Repo, revision: p.Revision, commit: p.Commit, file: g[0]}, report)
				for _, f := range g[1:] {
					if err == nil {
						err = p.cache.link(p.Repo, p.Commit, f.Path, f.Etag())
					}
				}
				if err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, g := range groups {
		select {
		case jobs <- g:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return first
	}
	return p.cache.setRef(p.Repo, p.Revision, p.Commit)
}

func compileGlobs(globs []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, len(globs))
	for i, g := range globs {
		re, err := globRegexp(g)
		if err != nil {
			return nil, fmt.Errorf("hub: glob %q: %w", g, err)
		}
		out[i] = re
	}
	return out, nil
}

// globRegexp translates an fnmatch glob into a regular expression.
func globRegexp(g string) (*regexp.Regexp, error) {
	if strings.HasSuffix(g, "/") {
		g += "*"
	}
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := strings.IndexByte(g[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			set := g[i+1 : i+1+j]
			if neg, ok := strings.CutPrefix(set, "!"); ok {
				set = "^" + neg
			}
			b.WriteString("[" + strings.ReplaceAll(strings.ReplaceAll(set, `\`, `\\`), "[", `\[`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

func matchAny(res []*regexp.Regexp, p string) bool {
	for _, re := range res {
		if re.MatchString(p) {
			return true
		}
	}
	return false
}
