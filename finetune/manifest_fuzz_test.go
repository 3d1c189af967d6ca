package finetune

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzManifest parses arbitrary bytes as a checkpoint's manifest. Nothing
// may panic; what parses names only plain files of the checkpoint, and
// written back and parsed again it is the same manifest.
func FuzzManifest(f *testing.F) {
	sha := strings.Repeat("0123456789abcdef", 4)
	for _, seed := range []string{
		`{"version":1,"step":3,"files":{"model.safetensors":{"size":11472,"sha256":"` + sha + `"},"trainer_state.json":{"size":139,"sha256":"` + sha + `"}}}`,
		`{"version": 1, "step": 0, "files": {"config.json": {"size": 0, "sha256": "` + sha + `"}}}` + "\n",
		`{"version":2,"step":3,"files":{"a":{"size":1,"sha256":"` + sha + `"}}}`,
		`{"version":1,"step":-1,"files":{"a":{"size":1,"sha256":"` + sha + `"}}}`,
		`{"version":1,"step":1,"files":{}}`,
		`{"version":1,"step":1,"files":{"../x":{"size":1,"sha256":"` + sha + `"}}}`,
		`{"version":1,"step":1,"files":{"checkpoint.json":{"size":1,"sha256":"` + sha + `"}}}`,
		`{"version":1,"step":1,"files":{"a":{"size":-1,"sha256":"` + sha + `"}}}`,
		`{"version":1,"step":1,"files":{"a":{"size":1,"sha256":"` + strings.ToUpper(sha) + `"}}}`,
		`{"version":1,"step":1,"files":{"a":{"size":1,"sha256":"` + sha + `","extra":1}}}`,
		`{"version":1,"step":1,"files":{"a":{"size":1,"sha256":"` + sha + `"}}} {}`,
		`{"version":1,"step":1e400}`,
		`{"version":2,"step":4,"grid":{"data":1,"x":2,"y":1,"z":2},"files":{"a":{"size":200,"sha256":"` + sha + `"},"b":{"size":200,"sha256":"` + sha + `"},"c":{"size":200,"sha256":"` + sha + `"},"d":{"size":200,"sha256":"` + sha + `"}},` +
			`"piece_files":["a","b","c","d"],"tensors":{"w":{"shape":[2,4],"grid":{"parts":[1,2,2],"base":0,"strides":[0,1,2],"dtype":"F32"}},` +
			`"n":{"shape":[4],"grid":{"parts":[1,2,1],"base":2,"strides":[0,1,0],"dtype":"F32"}}}}`,
		`{"version":2,"step":4,"grid":{"data":2,"x":2,"y":1,"z":1},"files":{"a":{"size":200,"sha256":"` + sha + `"},"b":{"size":200,"sha256":"` + sha + `"}},` +
			`"tensors":{"w":{"shape":[2,4],"pieces":[{"file":"a","offset":80,"dtype":"F32","offsets":[0,0],"extents":[2,2],"flat":[0,4]},` +
			`{"file":"b","offset":80,"dtype":"F32","offsets":[0,2],"extents":[2,2],"flat":[0,4]}]},` +
			`"n":{"shape":[4],"pieces":[{"file":"a","offset":96,"dtype":"F32","offsets":[0],"extents":[4],"flat":[0,4]}]}}}`,
		`{"version":2,"step":4,"grid":{"data":1,"x":1,"y":1,"z":1},"files":{"a":{"size":200,"sha256":"` + sha + `"}},` +
			`"tensors":{"w":{"shape":[2,4],"pieces":[{"file":"a","offset":80,"dtype":"F32","offsets":[0,0],"extents":[2,4],"flat":[0,5]},` +
			`{"file":"a","offset":80,"dtype":"F32","offsets":[0,0],"extents":[2,4],"flat":[4,8]}]}}}`,
		`null`, ``, `[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		for name, s := range m.Files {
			if !plainName(name) || name == ManifestFile || s.Size < 0 || !isSHA256(s.SHA256) {
				t.Fatalf("accepted file %q: %+v", name, s)
			}
		}
		b, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("the manifest written back does not parse: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("written back and parsed: %+v, want %+v", again, m)
		}
	})
}
