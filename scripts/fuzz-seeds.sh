#!/usr/bin/env bash
# Seeds `make fuzz`'s corpora, fuzz/corpus/TARGET/, from the repository's
# fixtures and the external corpora under tests/corpora: every HCL file for
# hcl_parse, every Go template case for template, every JSONTestSuite file
# and JSON fixture for json, every pattern of RE2's search table with each
# of its strings for regex, small tar, tar.gz, zip and gzip files made
# here for archive (the first byte of an archive input picks its format),
# and answers of each framing for http_response (the first byte picks how
# they are split and the method).
# Seeds are only added: what earlier runs found stays.
#
# Usage: scripts/fuzz-seeds.sh [TARGET...]   (all targets when none; python3
# reads the corpora and makes the archives)
set -euo pipefail

cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(hcl_parse template json regex archive http_response)

for target in "${targets[@]}"; do
    dir=fuzz/corpus/$target
    mkdir -p "$dir"
    case $target in
    hcl_parse)
        cp tests/fixtures/*.hcl tests/fixtures/*.json "$dir/"
        find tests/corpora/hcl-specsuite -name '*.hcl' | while read -r f; do
            cp "$f" "$dir/specsuite-$(echo "${f#tests/corpora/hcl-specsuite/}" | tr / -)"
        done
        ;;
    json)
        cp tests/corpora/jsontestsuite/test_parsing/*.json "$dir/"
        cp tests/fixtures/*.json "$dir/"
        cp tests/corpora/go-template/tval.json "$dir/"
        ;;
    template | regex | archive | http_response)
        python3 - "$target" "$dir" <<'PY'
import ast, gzip, io, json, sys, tarfile, zipfile

target, out = sys.argv[1], sys.argv[2]

def write(name, data):
    with open(f"{out}/{name}", "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

if target == "template":
    n = 0
    for table in ("exec", "parse"):
        for line in open(f"tests/corpora/go-template/{table}.jsonl", encoding="utf-8"):
            write(f"go-{table}-{n}", json.loads(line)["input"])
            n += 1
elif target == "regex":
    # The table's strings and patterns are Go-quoted; the escapes it uses
    # read the same as Python's.
    lines = open("tests/corpora/re2/re2-search.txt", encoding="utf-8").read().split("\n")
    strings, n, i = [], 0, 0
    while i < len(lines):
        if lines[i] == "strings":
            strings, i = [], i + 1
            while lines[i] != "regexps":
                strings.append(ast.literal_eval(lines[i]))
                i += 1
        elif lines[i].startswith('"'):
            pattern = ast.literal_eval(lines[i])
            for s in strings:
                write(f"re2-{n}", pattern + "\n" + s)
                n += 1
        i += 1
elif target == "http_response":
    answers = {
        "length": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n",
        "close": b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nuntil the end",
        "interim": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        "switch": b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\nraw",
        "redirect": b"HTTP/1.1 302 Found\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n",
    }
    for name, answer in answers.items():
        write(name, b"\x00" + answer)
        write(f"{name}-split", b"\x02" + answer)
    write("head", b"\x10" + answers["length"])
else:
    files = [("run.sh", b"#!/bin/sh\necho hi\n", 0o755), ("conf/app.conf", b"port = 8080\n", 0o644)]
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("conf/link")
        link.type, link.linkname = tarfile.SYMTYPE, "app.conf"
        t.addfile(link)
    zip_bytes = io.BytesIO()
    with zipfile.ZipFile(zip_bytes, "w") as z:
        for name, data, _ in files:
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("stored.txt", b"stored", compress_type=zipfile.ZIP_STORED)
    write("tar", b"\x00" + tar_bytes.getvalue())
    write("tar.gz", b"\x01" + gzip.compress(tar_bytes.getvalue()))
    write("zip", b"\x02" + zip_bytes.getvalue())
    write("gz", b"\x03" + gzip.compress(b"hello\n" * 10))
PY
        ;;
    *)
        echo "error: no seeds for fuzz target $target" >&2
        exit 1
        ;;
    esac
    echo "fuzz/corpus/$target: $(find "$dir" -type f | wc -l) inputs"
done
