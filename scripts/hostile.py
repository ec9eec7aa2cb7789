#!/usr/bin/env python3
"""Hostile-input replay against a pylon binary (issue 38): mutated files, flags, environment
variables, checkpoints and injected faults, each case run with a time limit and classified.

    scripts/hostile.py build/src/pylon --work /tmp/hostile --seed 1 --cases 1000

Python 3 standard library only. The script first makes small valid inputs with the binary (a
tokenizer and token files, a 2-rank checkpoint, a llama folder, edge files, a CPU trace; ncu CSVs
and tokenizer.json files come from tests/), then runs the cases, at most --jobs at a time, each in
its own folder under WORK/cases with its own process session. Classes (docs/testing.md):

  clean        non-zero exit (1 or 2) with one line on stderr
  accepted-ok  exit 0 where that is right: a value inside its range, a mutation nothing checks
               (bytes of a token file, a trace's text), or data the command does not read
  multi-line   non-zero exit with more than one stderr line (a warning)
  no-message   non-zero exit with nothing on stderr (a warning)
  slow         a value inside its range still computing at the time limit (using the CPU) without
               a progress line (a warning: legitimate work, but silent for that long)
  silent       exit 0 on data covered by a checksum that was corrupted, on a value outside its
               documented range, or on an input the documentation says is refused
  crash        killed by a signal we did not send, an exit code other than 0, 1, 2 and 4 (a rank
               that lost a peer: docs/cli.md), or a sanitizer report
  hang         no exit within --timeout (a command still printing progress when a value asks for
               that much work is accepted-ok, one computing silently is slow), or a process of the
               case left running after it
  broken       a follow-up that must work did not (resuming from `latest` after a killed save)

Cases are chosen and mutated deterministically from --seed (fault cases kill at seeded moments;
their outcome class does not depend on the moment). Exit status: 1 if any crash, hang, silent or
broken case, else 0; 2 when the inputs could not be made. Every case's result is in
WORK/report.json; the folders of failing cases are kept with a reproducer line.
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

FAILURES = ("crash", "hang", "silent", "broken")
CLASSES = ("clean", "accepted-ok", "multi-line", "no-message", "slow") + FAILURES
MCLASSES = ("files", "flags", "env", "checkpoints", "faults")
# Share of the case budget per mutation class (faults are the slowest: several ranks each).
WEIGHTS = {"files": 0.36, "flags": 0.24, "env": 0.12, "checkpoints": 0.22, "faults": 0.06}
REPO = Path(__file__).resolve().parent.parent
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")

# The tiny models every case uses (a fraction of a second per run).
MODEL = ["--preset", "causal", "--vocab", "300", "--dim", "32", "--layers", "2", "--heads", "4"]
SHAPE = ["--seq", "16", "--batch", "4"]
LLAMA = ["--preset", "llama", "--vocab", "300", "--dim", "32", "--layers", "1", "--heads", "4", "--kv-heads", "2"]


# ----------------------------------------------------------------------------------------------
# Cases


class Case:
    """One run of pylon. `args` and `env` values may hold {C} (the case folder) and {B} (the base
    inputs). expect: 'reject' (must not exit 0), 'accept' (exit 0 or a clean refusal),
    'either' (anything but a crash or hang), 'signal' (we send `sig`: dying by it is expected)."""

    def __init__(self, mclass, group, name, args, expect, env=None, unset=(), prepare=None,
                 timeout=None, during=None, peers=(), after=None, sig=None):
        self.mclass, self.group, self.name = mclass, group, name
        self.args, self.expect, self.env, self.unset = list(args), expect, dict(env or {}), tuple(unset)
        self.prepare, self.timeout, self.during, self.peers, self.after, self.sig = (
            prepare, timeout, during, list(peers), after, sig)
        self.index = -1


def subst(text, cdir, base):
    if isinstance(text, bytes):
        return text.replace(b"{C}", os.fsencode(cdir)).replace(b"{B}", os.fsencode(base))
    return text.replace("{C}", str(cdir)).replace("{B}", str(base))


# ----------------------------------------------------------------------------------------------
# Small file helpers


def write(path, data):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data if isinstance(data, bytes) else data.encode())


def read(path):
    return Path(path).read_bytes()


def deep(n, open_="[", close="]"):
    return open_ * n + close * n


def flip_bytes(data, rng, count, lo=0, hi=None):
    """XOR `count` bytes at seeded positions in [lo, hi) with non-zero masks."""
    hi = len(data) if hi is None else hi
    out = bytearray(data)
    spots = []
    for _ in range(count):
        at = rng.randrange(lo, hi)
        out[at] ^= rng.randrange(1, 256)
        spots.append(at)
    return bytes(out), spots


def safetensors_parts(data):
    (n,) = struct.unpack_from("<Q", data, 0)
    return n, json.loads(data[8:8 + n])


def safetensors_with_header(data, header):
    """The file with another JSON header (the data kept where it was)."""
    n, _ = safetensors_parts(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


def safetensors_subset(data, names):
    """A safetensors file of the tensors `names` of `data` (their bytes copied), metadata kept."""
    n, header = safetensors_parts(data)
    out_header, chunks, at = {}, [], 0
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    for name in names:
        begin, end = header[name]["data_offsets"]
        out_header[name] = dict(header[name], data_offsets=[at, at + end - begin])
        chunks.append(data[8 + n + begin:8 + n + end])
        at += end - begin
    text = json.dumps(out_header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def safetensors_poison(data, rng, value):
    """Writes `value` (a float) into one seeded element of one F32 tensor; returns (data, name)."""
    n, header = safetensors_parts(data)
    names = sorted(k for k, v in header.items() if k != "__metadata__" and v.get("dtype") == "F32")
    name = rng.choice(names)
    begin, end = header[name]["data_offsets"]
    at = 8 + n + begin + 4 * rng.randrange((end - begin) // 4)
    return data[:at] + struct.pack("<f", value) + data[at + 4:], name


EDGE_FIXED = 24


def edge_parts(data):
    magic, version, crc, n = struct.unpack_from("<8sIIQ", data, 0)
    return version, json.loads(data[EDGE_FIXED:EDGE_FIXED + n]), n


def edge_covered(data):
    """Byte ranges an edge file's checks cover: the fixed header and JSON (magic, version, CRC),
    every tensor's values and scales and the tokenizer (XXH3-64). The rest is zero padding."""
    _, header, n = edge_parts(data)
    ranges = [(0, EDGE_FIXED + n)]
    tok = header.get("tokenizer")
    if tok:
        ranges.append((tok["offset"], tok["offset"] + tok["length"]))
    for t in header["tensors"]:
        ranges.append((t["offset"], t["offset"] + t["length"]))
        q = t.get("quant")
        if q:
            ranges.append((q["scale_offset"], q["scale_offset"] + q["scale_length"]))
    return ranges


def in_ranges(at, ranges):
    return any(lo <= at < hi for lo, hi in ranges)


def edge_with_header(data, header_text, version=None):
    """The edge file with another JSON header, its length and CRC-32 recomputed (so that the parser
    behind the CRC sees it). The data stays at its offsets."""
    old_version, _, n = edge_parts(data)
    version = old_version if version is None else version
    fixed = b"PYLONEDG" + struct.pack("<IIQ", version, zlib.crc32(header_text) & 0xFFFFFFFF, len(header_text))
    body = fixed + header_text
    rest = data[EDGE_FIXED + n:]
    if len(body) <= EDGE_FIXED + n:
        body += b"\0" * (EDGE_FIXED + n - len(body))
        return body + rest
    grow = len(body) - (EDGE_FIXED + n)  # eat into the padding before the first blob
    return body + rest[grow:]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------------------
# Processes


def session_members(sid):
    """Live (non-zombie) processes of session `sid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry))
    return found


def session_cpu_seconds(sid):
    """CPU time (user + system) of the live processes of session `sid`."""
    ticks = 0
    for pid in session_members(sid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def children(pid):
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def kill_session(sid):
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# Making the valid inputs


class Base:
    """The valid inputs every case starts from, in WORK/base."""

    def __init__(self, binary, work, seed):
        self.binary, self.dir = binary, work / "base"
        self.seed = seed

    def env(self):
        return base_env(self.dir.parent)

    def run(self, *args, check=True):
        r = subprocess.run([self.binary, *args], cwd=self.dir, env=self.env(), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=300)
        if check and r.returncode != 0:
            print(f"hostile.py: making the inputs failed: pylon {' '.join(args)}\n{r.stderr.decode(errors='replace')}",
                  file=sys.stderr)
            raise SystemExit(2)
        return r

    def make(self):
        d = self.dir
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        (d.parent / "home").mkdir(exist_ok=True)
        rng = random.Random(f"{self.seed}:text")
        words = ("the quick brown fox jumps over a lazy dog while pylon trains small models on cpu ranks "
                 "and exports edge files with checksums on every tensor").split()
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + "." for _ in range(400)]
        write(d / "text.txt", "\n".join(lines) + "\n")
        self.run("tokenize", "--input", "text.txt", "--out", "tok.bin", "--train-vocab", "300",
                 "--val-fraction", "0.1")
        self.run("tokenize", "--input", "text.txt", "--out", "tok32.bin", "--model", "tok.model", "--width", "u32")
        common = [*MODEL, *SHAPE, "--data", "tok.bin", "--tokenizer", "tok.model", "--log-every", "0"]
        self.run("train", *common, "--steps", "2", "--save-every", "1", "--save", "ckpt", "--nproc-per-node", "2")
        self.run("train", *LLAMA, *SHAPE, "--data", "tok.bin", "--tokenizer", "tok.model", "--log-every", "0",
                 "--steps", "1", "--save", "llama")
        hf = d / "hf"
        hf.mkdir()
        for f in ("config.json", "tokenizer.model"):
            shutil.copy(d / "llama/step_000001" / f, hf / f)
        # A Hugging Face folder: config.json sets the model (the weights carry no pylon.* keys).
        weights = read(d / "llama/step_000001/model.safetensors")
        _, header = safetensors_parts(weights)
        header["__metadata__"] = {"format": "pt"}
        write(hf / "model.safetensors", safetensors_with_header(weights, header))
        # The same folder sharded: two files and model.safetensors.index.json's weight_map.
        hfs = d / "hf-sharded"
        hfs.mkdir()
        shutil.copy(hf / "config.json", hfs / "config.json")
        data = read(hf / "model.safetensors")
        names = sorted(k for k in safetensors_parts(data)[1] if k != "__metadata__")
        halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
        weight_map = {}
        for f, part in halves.items():
            write(hfs / f, safetensors_subset(data, part))
            weight_map.update({t: f for t in part})
        write(hfs / "model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
        shutil.copy(d / "ckpt/step_000002/model.safetensors", d / "weights.safetensors")  # no manifest
        self.run("export", "--model", "ckpt", "--out", "int4.edge", "--quant", "int4")
        self.run("export", "--model", "ckpt", "--out", "f16.edge", "--quant", "f16")
        self.run("train", *common, "--steps", "2", "--profile", "prof", "--profile-wait", "0",
                 "--profile-warmup", "0", "--profile-active", "1")
        shutil.copy(d / "prof/trace.rank0.json", d / "trace.json")
        # A default-data cache of these files, so that runs without --data stay small.
        cache = d / "datacache/fortunes-bpe4096"
        cache.mkdir(parents=True)
        shutil.copy(d / "tok.bin", cache / "train.bin")
        shutil.copy(d / "tok.val.bin", cache / "val.bin")
        shutil.copy(d / "tok.model", cache / "tokenizer.model")
        # Committed inputs from the repository when it is there; small fallbacks otherwise.
        data = REPO / "tests/profile/data"
        self.ncu = []
        for name in ("ncu_exports/pylon_metrics.csv", "ncu_h200_minillm_step.csv"):
            if (data / name).is_file():
                shutil.copy(data / name, d / Path(name).name)
                self.ncu.append(Path(name).name)
        self.traces = ["trace.json"]
        if (data / "trace_cpu_1rank.json").is_file():
            shutil.copy(data / "trace_cpu_1rank.json", d / "trace_committed.json")
            self.traces.append("trace_committed.json")
        self.hf_tokenizers = []
        for name in ("gpt2", "qwen2"):
            src = REPO / "tests/io/tokenizer_golden" / name
            if (src / "tokenizer.json").is_file():
                shutil.copytree(src, d / f"tok-{name}")
                self.hf_tokenizers.append(f"tok-{name}")
        write(d / "empty", b"")
        (d / "emptydir").mkdir()
        return self


def base_env(work):
    """What every case runs with (the reproducer lists it): nothing from the caller's environment
    but PATH, one thread per process, the small default-data cache, progress lines every second."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work / "home"), "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "PYLON_DATA_DIR": str(work / "base/datacache"), "PYLON_TEST_PROGRESS_MS": "1000",
            "ASAN_OPTIONS": "exitcode=86:detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1:exitcode=86"}


# ----------------------------------------------------------------------------------------------
# Command templates. B = the base folder ({B}), C = the case folder ({C}).

TOK, VAL, TOK32, SPM, CKPT = "{B}/tok.bin", "{B}/tok.val.bin", "{B}/tok32.bin", "{B}/tok.model", "{B}/ckpt"


def train_args(*extra, steps="2"):
    """A two-step run of the tiny model; `extra` flags replace the base's or are added (a flag
    given twice is an error of its own)."""
    return replace_flags(["train", *MODEL, *SHAPE, "--steps", steps, "--data", TOK, "--log-every", "1",
                          "--eval-every", "0"], list(extra))


def eval_args(model=CKPT, data=TOK, *extra):
    return replace_flags(["eval", "--model", model, "--data", data, "--batch", "2", "--seq", "16", "--steps", "2"],
                         list(extra))


def generate_args(model=CKPT, *extra):
    return replace_flags(["generate", "--model", model, "--prompt", "the quick", "--max-new-tokens", "4",
                          "--context", "64"], list(extra))


def export_args(model=CKPT, *extra):
    return replace_flags(["export", "--model", model, "--out", "{C}/out.edge", "--quant", "int4"], list(extra))


def resume_args(ckpt="{C}/ckpt", *extra):
    return train_args("--resume", ckpt, "--save", "{C}/ckpt", *extra, steps="3")


# ----------------------------------------------------------------------------------------------
# (1) files: every parser a user can feed


def file_case(group, name, consumers, mutate, expect_for, base_rel, out_name=None):
    """Cases for one mutated file: `mutate(data) -> data` is applied once per consumer; each
    consumer is (label, args with {F} for the mutated file, kind); expect_for(kind) gives the
    expectation for that consumer."""
    out = []
    src_name = out_name or Path(base_rel).name
    for label, args, kind in consumers:
        def prepare(cdir, base, mutate=mutate, base_rel=base_rel, src_name=src_name):
            write(cdir / src_name, mutate(read(base / base_rel)))
        out.append(Case("files", group, f"{name} -> {label}", [a.replace("{F}", "{C}/" + src_name) for a in args],
                        expect_for(kind), prepare=prepare))
    return out


def token_consumers():
    return [("train --data", train_args("--data", "{F}"), "train"),
            ("train --val-data", train_args("--val-data", "{F}", "--eval-every", "1", "--eval-steps", "1"), "val"),
            ("eval --data", eval_args(data="{F}"), "eval")]


def gen_files(base, rng):
    cases = []
    B = base.dir

    # Token files: raw uint16 (no checks but the ids and the size) and the llm.c header form.
    raw = read(B / "tok.bin")
    for i in range(6):
        r = random.Random(rng.random())
        n = r.choice([1, 2, 8, 64])
        cases += file_case("files/token", f"tok.bin: {n} flipped bytes (seed {i})", token_consumers(),
                           lambda d, n=n, r=r.random(): flip_bytes(d, random.Random(r), n)[0],
                           lambda k: "either", "tok.bin", f"tok{i}.bin")
    for label, fn, exp in [
            ("tok.bin truncated to 0 bytes", lambda d: b"", "reject"),
            ("tok.bin truncated to 1 byte", lambda d: d[:1], "reject"),
            ("tok.bin truncated to an odd length", lambda d: d[:len(d) // 2 | 1], "reject"),
            ("tok.bin truncated to 2 tokens", lambda d: d[:4], "either"),
            ("tok.bin extended by 1 byte", lambda d: d + b"\x07", "reject"),
            ("tok.bin extended by 1 MiB of 0xff", lambda d: d + b"\xff" * (1 << 20), "reject"),
            ("tok.bin zeroed", lambda d: bytes(len(d)), "either"),
            ("tok.bin every id 0xffff", lambda d: b"\xff" * len(d), "reject")]:
        cases += file_case("files/token", label, token_consumers(), fn, lambda k, e=exp: e, "tok.bin")

    def llmc(field, value):
        def f(d):
            h = bytearray(d)
            struct.pack_into("<i", h, 4 * field, value)
            return bytes(h)
        return f
    tok32_consumers = token_consumers()
    for label, fn, exp in [
            ("tok32.bin: llm.c version 3", llmc(1, 3), "reject"),
            ("tok32.bin: llm.c version 0", llmc(1, 0), "reject"),
            ("tok32.bin: llm.c version 1 (uint16) on uint32 data", llmc(1, 1), "reject"),
            ("tok32.bin: token count + 1", lambda d: llmc(2, struct.unpack_from("<i", d, 8)[0] + 1)(d), "reject"),
            ("tok32.bin: token count - 1", lambda d: llmc(2, struct.unpack_from("<i", d, 8)[0] - 1)(d), "reject"),
            ("tok32.bin: token count 0", llmc(2, 0), "reject"),
            ("tok32.bin: token count -1", llmc(2, -1), "reject"),
            ("tok32.bin: token count 2^31-1", llmc(2, 2**31 - 1), "reject"),
            ("tok32.bin: magic flipped (read as raw uint16)", llmc(0, 20240521), "either"),
            ("tok32.bin: header only", lambda d: d[:1024], "reject"),
            ("tok32.bin: half a header", lambda d: d[:512], "reject")]:
        cases += file_case("files/token", label, tok32_consumers, fn, lambda k, e=exp: e, "tok32.bin")

    # A lone safetensors file (a copy of a checkpoint's model.safetensors: metadata, no manifest).
    st_consumers = [("eval --model", eval_args(model="{F}"), "load"),
                    ("generate --model", generate_args("{F}", "--tokenizer", SPM), "load"),
                    ("export --model", export_args("{F}"), "load"),
                    ("train --init-from", train_args("--init-from", "{F}", steps="1"), "load")]
    st = read(B / "weights.safetensors")
    n, header = safetensors_parts(st)
    for i in range(8):
        r = random.Random(rng.random())
        where = r.choice(["header", "data", "anywhere"])
        lo, hi = {"header": (8, 8 + n), "data": (8 + n, len(st)), "anywhere": (0, len(st))}[where]
        cnt = r.choice([1, 3, 16])
        cases += file_case("files/safetensors", f"weights.safetensors: {cnt} flipped bytes in the {where} (seed {i})",
                           st_consumers, lambda d, c=cnt, lo=lo, hi=hi, s=r.random():
                           flip_bytes(d, random.Random(s), c, lo, hi)[0], lambda k: "either",
                           "weights.safetensors", f"w{i}.safetensors")

    def st_edit(edit):
        def f(d):
            _, h = safetensors_parts(d)
            h = json.loads(json.dumps(h))
            edit(h)
            return safetensors_with_header(d, h)
        return f
    first = sorted(k for k in header if k != "__metadata__")[0]

    def set_meta(key, value):
        return st_edit(lambda h: h["__metadata__"].__setitem__(key, value))

    def set_t(key, value, name=first):
        return st_edit(lambda h: h[name].__setitem__(key, value))

    edits = [
        ("header length 2^64-1", lambda d: struct.pack("<Q", 2**64 - 1) + d[8:], "reject"),
        ("header length 0", lambda d: struct.pack("<Q", 0) + d[8:], "reject"),
        ("header length + 1", lambda d: struct.pack("<Q", n + 1) + d[8:], "reject"),
        ("header length - 1", lambda d: struct.pack("<Q", n - 1) + d[8:], "reject"),
        ("header length = file size", lambda d: struct.pack("<Q", len(d) - 8) + d[8:], "reject"),
        ("truncated to 7 bytes", lambda d: d[:7], "reject"),
        ("truncated inside the header", lambda d: d[:8 + n // 2], "reject"),
        ("truncated inside the data", lambda d: d[:8 + n + (len(d) - 8 - n) // 2], "reject"),
        ("extended by 4096 bytes", lambda d: d + b"\x5a" * 4096, "either"),
        (f"{first}: data_offsets huge", set_t("data_offsets", [0, 2**63]), "reject"),
        (f"{first}: data_offsets negative", set_t("data_offsets", [-4, 0]), "reject"),
        (f"{first}: data_offsets reversed", set_t("data_offsets", list(reversed(header[first]["data_offsets"]))), "reject"),
        (f"{first}: data_offsets shifted by 4", set_t("data_offsets", [x + 4 for x in header[first]["data_offsets"]]), "reject"),
        (f"{first}: data_offsets 1e300", set_t("data_offsets", [0, 1e300]), "reject"),
        (f"{first}: shape negative", set_t("shape", [-1] + header[first]["shape"][1:]), "reject"),
        (f"{first}: shape 0", set_t("shape", [0] * len(header[first]["shape"])), "reject"),
        (f"{first}: shape 2^62 x 4", set_t("shape", [2**62, 4]), "reject"),
        (f"{first}: shape of 64 dims", set_t("shape", [1] * 64), "reject"),
        (f"{first}: shape a string", set_t("shape", "big"), "reject"),
        (f"{first}: dtype F64", set_t("dtype", "F64"), "reject"),
        (f"{first}: dtype garbage", set_t("dtype", "\u2603"), "reject"),
        (f"{first}: dtype nested 100000 deep", st_edit(lambda h: h[first].__setitem__("dtype", "DEEP")), "reject"),
        ("a tensor removed", st_edit(lambda h: h.pop(first)), "reject"),
        ("pylon.dim 'abc'", set_meta("pylon.dim", "abc"), "reject"),
        ("pylon.dim -32", set_meta("pylon.dim", "-32"), "reject"),
        ("pylon.dim 2^40", set_meta("pylon.dim", str(2**40)), "reject"),
        ("pylon.layers 2^31", set_meta("pylon.layers", str(2**31)), "reject"),
        ("pylon.layers 0", set_meta("pylon.layers", "0"), "reject"),
        ("pylon.heads 0", set_meta("pylon.heads", "0"), "reject"),
        ("pylon.heads 3", set_meta("pylon.heads", "3"), "reject"),
        ("pylon.vocab 1e30", set_meta("pylon.vocab", "1e30"), "reject"),
        ("pylon.rope_theta 0", set_meta("pylon.rope_theta", "0"), "reject"),
        ("pylon.rope_theta nan", set_meta("pylon.rope_theta", "nan"), "reject"),
        ("pylon.norm_eps -1", set_meta("pylon.norm_eps", "-1"), "reject"),
        ("pylon.preset garbage", set_meta("pylon.preset", "gpt5"), "reject"),
        ("pylon.preset removed", st_edit(lambda h: h["__metadata__"].pop("pylon.preset")), "reject"),
        ("pylon.qkv_bias 7", set_meta("pylon.qkv_bias", "7"), "reject"),
        ("metadata value a number", set_meta("pylon.dim", 32), "reject"),
        ("metadata nested 50000 deep", set_meta("pylon.dim", "DEEP"), "reject"),
        ("__metadata__ a list", st_edit(lambda h: h.__setitem__("__metadata__", [1, 2])), "reject"),
    ]
    for label, fn, exp in edits:
        if "DEEP" in label or "deep" in label:
            inner = fn
            fn = (lambda inner: lambda d: _deepen_safetensors(inner(d)))(inner)
        cases += file_case("files/safetensors", "weights.safetensors: " + label, st_consumers, fn,
                           lambda k, e=exp: e, "weights.safetensors")
    for val, label in [(float("nan"), "NaN"), (float("inf"), "Inf"), (-float("inf"), "-Inf")]:
        cases += file_case("files/safetensors", f"weights.safetensors: {label} in a tensor", st_consumers,
                           lambda d, v=val, s=rng.random(): safetensors_poison(d, random.Random(s), v)[0],
                           lambda k: "reject", "weights.safetensors")

    # Edge files: flips inside what a check covers must be refused by every load (inspect reads the
    # header only); flips in the zero padding change nothing a reader uses.
    for edge in ("int4.edge", "f16.edge"):
        data = read(B / edge)
        cov = edge_covered(data)
        _, eh, en = edge_parts(data)
        consumers = [("inspect", ["inspect", "{F}"], "header"),
                     ("inspect --verify", ["inspect", "--verify", "{F}"], "full"),
                     ("eval", eval_args(model="{F}"), "full"),
                     ("generate", generate_args("{F}"), "full"),
                     ("export", export_args("{F}"), "full")]
        header_end = EDGE_FIXED + en
        for i in range(10):
            r = random.Random(rng.random())
            region = r.choice(["fixed", "json", "tensors", "padding", "anywhere"])
            if region == "fixed":
                lo, hi = 0, EDGE_FIXED
            elif region == "json":
                lo, hi = EDGE_FIXED, header_end
            elif region == "tensors":
                lo, hi = cov[1 + r.randrange(len(cov) - 1)]
            else:
                lo, hi = 0, len(data)
            if region == "padding":
                spots = [a for a in (r.randrange(len(data)) for _ in range(200)) if not in_ranges(a, cov)][:2]
                mutated = bytearray(data)
                for a in spots:
                    mutated[a] ^= 0x41
                mutated = bytes(mutated)
            else:
                mutated, spots = flip_bytes(data, r, r.choice([1, 2, 5]), lo, hi)
            covered = any(in_ranges(a, cov) for a in spots)
            in_header = any(a < header_end for a in spots)
            v_after = struct.unpack_from("<I", mutated, 8)[0]

            def exp(kind, covered=covered, in_header=in_header, v_after=v_after):
                if not covered or v_after == 1:
                    return "either"
                return "reject" if (kind == "full" or in_header) else "either"
            cases += file_case("files/edge", f"{edge}: bytes {spots} flipped ({region}, "
                               f"{'covered' if covered else 'padding'})", consumers,
                               lambda d, m=mutated: m, exp, edge, f"e{i}.edge")
        for label, fn, exp in [
                ("truncated to 16 bytes", lambda d: d[:16], "reject"),
                ("truncated by 4096 bytes", lambda d: d[:-4096], "reject"),
                ("truncated by 1 byte", lambda d: d[:-1], "reject"),
                ("truncated to its header", lambda d: d[:4096], "reject"),
                ("extended by 1 byte", lambda d: d + b"\0", "reject"),
                ("extended by 4096 zero bytes", lambda d: d + bytes(4096), "either"),
                ("extended by 4096 bytes of 0xff", lambda d: d + b"\xff" * 4096, "either"),
                ("the last tensor's values zeroed", lambda d, c=cov: d[:c[-1][0]] + bytes(c[-1][1] - c[-1][0]) + d[c[-1][1]:], "reject"),
                ("everything after the header zeroed", lambda d: d[:4096] + bytes(len(d) - 4096), "reject"),
                ("version 1 (its checksums ignored)", lambda d: d[:8] + struct.pack("<I", 1) + d[12:], "either"),
                ("version 3", lambda d: d[:8] + struct.pack("<I", 3) + d[12:], "reject"),
                ("version 0xffffffff", lambda d: d[:8] + struct.pack("<I", 2**32 - 1) + d[12:], "reject"),
                ("JSON length 2^64-1", lambda d: d[:16] + struct.pack("<Q", 2**64 - 1) + d[24:], "reject"),
                ("JSON length 0", lambda d: d[:16] + struct.pack("<Q", 0) + d[24:], "reject"),
                ("magic lower-case", lambda d: b"pylonedg" + d[8:], "reject")]:
            cases += file_case("files/edge", f"{edge}: {label}", consumers, fn,
                               lambda k, e=exp, z="zeroed" in label: e if (e == "either" or k == "full" or not z) else "either",
                               edge)
        # JSON edits behind a recomputed CRC: the structure and config checks themselves.
        t0 = eh["tensors"][0]
        quant = next((t for t in eh["tensors"] if t.get("quant")), None)

        def ej(edit, version=None):
            def f(d):
                _, h, _ = edge_parts(d)
                edit(h)
                text = json.dumps(h).encode() if not isinstance(h, bytes) else h
                return edge_with_header(d, text, version)
            return f

        def cfg(key, value):
            return ej(lambda h: h["config"].__setitem__(key, value))

        def ten(key, value, i=0):
            return ej(lambda h: h["tensors"][i].__setitem__(key, value))
        json_edits = [
            ("JSON re-spaced, CRC recomputed", ej(lambda h: None), "either", "all"),
            ("config.vocab 0", cfg("vocab", 0), "reject", "model"),
            ("config.vocab -1", cfg("vocab", -1), "reject", "model"),
            ("config.vocab 2^63", cfg("vocab", 2**63), "reject", "model"),
            ("config.vocab 1e300", cfg("vocab", 1e300), "reject", "model"),
            ("config.vocab 'many'", cfg("vocab", "many"), "reject", "model"),
            ("config.dim 2^31", cfg("dim", 2**31), "reject", "model"),
            ("config.layers 100000", cfg("layers", 100000), "reject", "model"),
            ("config.heads 0", cfg("heads", 0), "reject", "model"),
            ("config.heads 3", cfg("heads", 3), "reject", "model"),
            ("config.kv_heads 3", cfg("kv_heads", 3), "reject", "model"),
            ("config.rope_theta 0", cfg("rope_theta", 0), "reject", "model"),
            ("config.rope_theta -1", cfg("rope_theta", -1), "reject", "model"),
            ("config.rope_theta 1e39", cfg("rope_theta", 1e39), "reject", "model"),
            ("config.norm_eps 0", cfg("norm_eps", 0), "reject", "model"),
            ("config.preset 'gpt5'", cfg("preset", "gpt5"), "reject", "model"),
            ("config null", ej(lambda h: h.__setitem__("config", None)), "reject", "all"),
            ("config.rope_scaling garbage", cfg("rope_scaling", {"factor": -1}), "reject", "model"),
            ("tensor 0 offset + 4096", ten("offset", t0["offset"] + 4096), "reject", "all"),
            ("tensor 0 offset 2^64-4096", ten("offset", 2**64 - 4096), "reject", "all"),
            ("tensor 0 offset -4096", ten("offset", -4096), "reject", "all"),
            ("tensor 0 offset unaligned", ten("offset", t0["offset"] + 2), "reject", "all"),
            ("tensor 0 length 2^63", ten("length", 2**63), "reject", "all"),
            ("tensor 0 length - 2", ten("length", t0["length"] - 2), "reject", "all"),
            ("tensor 0 shape [-1, 32]", ten("shape", [-1, 32]), "reject", "all"),
            ("tensor 0 shape [2^40, 2^40]", ten("shape", [2**40, 2**40]), "reject", "all"),
            ("tensor 0 shape []", ten("shape", []), "reject", "all"),
            ("tensor 0 dtype 'int3'", ten("dtype", "int3"), "reject", "all"),
            ("tensor 0 name changed", ten("name", "embed.weights"), "reject", "model"),
            ("tensor 0 xxh3_64 changed", ten("xxh3_64", "0123456789abcdef"), "reject", "full"),
            ("tensor 0 xxh3_64 removed", ej(lambda h: h["tensors"][0].pop("xxh3_64")), "reject", "all"),
            ("tensor 0 xxh3_64 a number", ten("xxh3_64", 12345), "reject", "all"),
            ("tensor 0 duplicated", ej(lambda h: h["tensors"].append(dict(h["tensors"][0]))), "reject", "all"),
            ("tensor 0 removed", ej(lambda h: h["tensors"].pop(0)), "reject", "model"),
            ("tensors emptied", ej(lambda h: h.__setitem__("tensors", [])), "reject", "model"),
            ("tensors an object", ej(lambda h: h.__setitem__("tensors", {})), "reject", "all"),
            ("tokenizer offset 2^63", ej(lambda h: h["tokenizer"].__setitem__("offset", 2**63)), "reject", "all"),
            ("tokenizer length + 1", ej(lambda h: h["tokenizer"].__setitem__("length", h["tokenizer"]["length"] + 1)), "reject", "full"),
            ("tokenizer xxh3_64 changed", ej(lambda h: h["tokenizer"].__setitem__("xxh3_64", "ffffffffffffffff")), "reject", "full"),
            ("header nested 100000 deep", lambda d: edge_with_header(d, deep(100000).encode()), "reject", "all"),
            ("header a JSON string", lambda d: edge_with_header(d, b'"tensors"'), "reject", "all"),
            ("header not JSON", lambda d: edge_with_header(d, b"{\"config\": "), "reject", "all"),
            ("header with a 1e400 number", lambda d: edge_with_header(d, b'{"config": {"vocab": 1e400}, "tensors": []}'), "reject", "all"),
            ("version 1 with checksums removed", ej(lambda h: [t.pop("xxh3_64", None) for t in h["tensors"]] and h["tokenizer"].pop("xxh3_64", None), 1), "either", "all"),
        ]
        if quant:
            qi = eh["tensors"].index(quant)
            json_edits += [
                ("int4 group_size 33", ten("quant", dict(quant["quant"], group_size=33), qi), "reject", "all"),
                ("int4 group_size 0", ten("quant", dict(quant["quant"], group_size=0), qi), "reject", "all"),
                ("int4 scale_offset 2^64-4096", ten("quant", dict(quant["quant"], scale_offset=2**64 - 4096), qi), "reject", "all"),
                ("int4 scale_length 1", ten("quant", dict(quant["quant"], scale_length=1), qi), "reject", "all"),
                ("int4 scale_dtype 'f8'", ten("quant", dict(quant["quant"], scale_dtype="f8"), qi), "reject", "all"),
                ("int4 quant removed", ej(lambda h, qi=qi: h["tensors"][qi].pop("quant")), "reject", "all"),
            ]
        for label, fn, exp, scope in json_edits:
            # scope: 'all' = the header reader refuses it (inspect too); 'model' = the model's
            # checks (inspect may print it); 'full' = a data check (inspect does not read data).
            cases += file_case("files/edge", f"{edge}: {label}", consumers, fn,
                               lambda k, e=exp, s=scope: e if (e == "either" or s == "all" or k == "full") else "either",
                               edge)

    # Tokenizers: SentencePiece models (protobuf) and tokenizer.json, through every command that
    # loads one. Nothing checksums them outside a checkpoint: a changed byte may still load.
    spm_consumers = [("tokenize --model", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", "{F}"], "t"),
                     ("train --tokenizer", train_args("--tokenizer", "{F}", steps="1"), "t"),
                     ("generate --tokenizer", generate_args(CKPT, "--tokenizer", "{F}"), "t"),
                     ("export --tokenizer", export_args(CKPT, "--tokenizer", "{F}"), "t")]
    for i in range(6):
        r = random.Random(rng.random())
        cnt = r.choice([1, 4, 32])
        cases += file_case("files/tokenizer", f"tok.model: {cnt} flipped bytes (seed {i})", spm_consumers,
                           lambda d, c=cnt, s=r.random(): flip_bytes(d, random.Random(s), c)[0],
                           lambda k: "either", "tok.model", f"t{i}.model")
    for label, fn, exp in [("tok.model truncated to half", lambda d: d[:len(d) // 2], "either"),
                           ("tok.model truncated to 3 bytes", lambda d: d[:3], "reject"),
                           ("tok.model empty", lambda d: b"", "reject"),
                           ("tok.model zeroed", lambda d: bytes(len(d)), "reject"),
                           ("tok.model extended by garbage", lambda d: d + bytes(range(256)) * 8, "either"),
                           ("tok.model replaced by JSON '{'", lambda d: b"{", "reject"),
                           ("tok.model replaced by 1 MiB of 0x0a", lambda d: b"\n" * (1 << 20), "reject")]:
        cases += file_case("files/tokenizer", label, spm_consumers, fn, lambda k, e=exp: e, "tok.model")
    for hf_tok in base.hf_tokenizers:
        rel = f"{hf_tok}/tokenizer.json"
        tj = json.loads(read(B / rel))
        consumers = [("tokenize --model", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", "{F}"], "t")]

        def tje(edit):
            def f(d):
                h = json.loads(d)
                edit(h)
                return json.dumps(h).encode()
            return f
        vocab_key = next(iter(tj["model"]["vocab"]))
        edits = [
            ("model.type WordPiece", tje(lambda h: h["model"].__setitem__("type", "WordPiece")), "reject"),
            ("model.vocab id -1", tje(lambda h: h["model"]["vocab"].__setitem__(vocab_key, -1)), "reject"),
            ("model.vocab id 2^40", tje(lambda h: h["model"]["vocab"].__setitem__(vocab_key, 2**40)), "reject"),
            ("model.vocab id 1.5", tje(lambda h: h["model"]["vocab"].__setitem__(vocab_key, 1.5)), "reject"),
            ("model.vocab emptied", tje(lambda h: h["model"].__setitem__("vocab", {})), "reject"),
            ("model.merges a merge of unknown tokens", tje(lambda h: h["model"]["merges"].insert(0, "\u2603\u2603 \u2604")), "reject"),
            ("model.merges an entry of one token", tje(lambda h: h["model"]["merges"].insert(0, "a")), "reject"),
            ("model.merges a number", tje(lambda h: h["model"]["merges"].insert(0, 7)), "reject"),
            ("model.dropout 0.5", tje(lambda h: h["model"].__setitem__("dropout", 0.5)), "reject"),
            ("pre_tokenizer a bad regex", tje(lambda h: h.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": False})), "reject"),
            ("normalizer Lowercase", tje(lambda h: h.__setitem__("normalizer", {"type": "Lowercase"})), "reject"),
            ("added_tokens id 2^40", tje(lambda h: h.__setitem__("added_tokens", [{"id": 2**40, "content": "<x>", "special": True}])), "reject"),
            ("model nested 100000 deep", lambda d: d.replace(b'"model"', b'"model_"', 1)[:-1] + b',"model":' + deep(100000).encode() + b"}", "reject"),
            ("truncated to half", lambda d: d[: len(d) // 2], "reject"),
            ("empty", lambda d: b"", "reject"),
        ]
        for i in range(4):
            edits.append((f"{[1, 4, 16, 64][i]} flipped bytes", lambda d, c=[1, 4, 16, 64][i], s=rng.random():
                          flip_bytes(d, random.Random(s), c)[0], "either"))
        for label, fn, exp in edits:
            cases += file_case("files/tokenizer", f"{rel}: {label}", consumers, fn, lambda k, e=exp: e, rel,
                               f"{hf_tok}.tokenizer.json")

    # Text for `tokenize --input`.
    text_consumers = [("tokenize (SentencePiece)", ["tokenize", "--input", "{F}", "--out", "{C}/t.bin", "--model", SPM], "spm")]
    if base.hf_tokenizers:
        text_consumers.append(("tokenize (tokenizer.json)", ["tokenize", "--input", "{F}", "--out", "{C}/t.bin",
                                                             "--model", "{B}/" + base.hf_tokenizers[0]], "hf"))
    for label, fn, exp in [("random bytes", lambda d: random.Random(7).randbytes(20000), {"hf": "reject"}),
                           ("invalid UTF-8 (a lone 0xff)", lambda d: d[:100] + b"\xff" + d[100:], {"hf": "reject"}),
                           ("NUL bytes", lambda d: d.replace(b" ", b"\0"), {}),
                           ("one 4 MB line", lambda d: d.replace(b"\n", b" ") * 180, {}),
                           ("empty", lambda d: b"", {}),
                           ("only newlines", lambda d: b"\n" * 100000, {}),
                           ("overlong UTF-8 (0xc0 0xaf)", lambda d: b"\xc0\xaf" * 100, {"hf": "reject"}),
                           ("UTF-16 surrogates in UTF-8", lambda d: b"\xed\xa0\x80" * 100, {"hf": "reject"})]:
        cases += file_case("files/text", f"text.txt: {label}", text_consumers, fn,
                           lambda k, e=exp: e.get(k, "either"), "text.txt")

    # Hugging Face folder: config.json (no checksums; its fields are validated).
    hf_consumers = [("eval --model", eval_args(model="{C}/hf"), "x"),
                    ("export --model", export_args("{C}/hf"), "x"),
                    ("train --init-from", ["train", *SHAPE, "--steps", "1", "--data", TOK, "--log-every", "0",
                                           "--init-from", "{C}/hf"], "x")]
    cfg = json.loads(read(B / "hf/config.json"))

    def hf_case(label, fn, exp):
        out = []
        for clabel, args, _ in hf_consumers:
            def prepare(cdir, base, fn=fn):
                shutil.copytree(base / "hf", cdir / "hf")
                write(cdir / "hf/config.json", fn(read(base / "hf/config.json")))
            out.append(Case("files", "files/hf-config", f"hf/config.json: {label} -> {clabel}", args, exp,
                            prepare=prepare))
        return out

    def cj(key, value):
        def f(d):
            h = json.loads(d)
            h[key] = value
            return json.dumps(h).encode()
        return f
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "head_dim"):
        for value in (0, -1, 2**31, 2**63, 1.5, "32", None, 1e300):
            # null for an optional key is its absence (transformers writes "head_dim": null)
            optional = key in ("head_dim", "num_key_value_heads") and value is None
            cases += hf_case(f"{key} {json.dumps(value)}", cj(key, value), "either" if optional else "reject")
    for key, values in (("rms_norm_eps", (0, -1, "x", 1e39)), ("rope_theta", (0, -1, None, 1e39)),
                        ("model_type", ("gpt2", 7, "")), ("hidden_act", ("gelu",)),
                        ("tie_word_embeddings", ("yes", 2)), ("attention_bias", ("no",)),
                        ("rope_scaling", ({"rope_type": "yarn"}, {"rope_type": "llama3", "factor": -1}, [], "x")),
                        ("mlp_bias", (True,))):
        for value in values:
            cases += hf_case(f"{key} {json.dumps(value)}", cj(key, value), "reject")
    cases += hf_case("nested 100000 deep", lambda d: deep(100000).encode(), "reject")
    cases += hf_case("a value nested 100000 deep", lambda d: d[:-1] + b', "extra": ' + deep(100000).encode() + b"}", "reject")
    cases += hf_case("empty", lambda d: b"", "reject")
    cases += hf_case("not an object", lambda d: b"[1, 2, 3]", "reject")
    cases += hf_case("an unknown key", cj("unknown_key_xyz", 1), "either")
    for i in range(3):
        cases += hf_case(f"{[1, 3, 9][i]} flipped bytes", lambda d, c=[1, 3, 9][i], s=rng.random():
                         flip_bytes(d, random.Random(s), c)[0], "either")

    # A sharded Hugging Face folder: model.safetensors.index.json's weight_map.
    idx_consumers = [("eval --model", eval_args(model="{C}/hfs"), "x"),
                     ("export --model", export_args("{C}/hfs"), "x"),
                     ("train --init-from", ["train", *SHAPE, "--steps", "1", "--data", TOK, "--log-every", "0",
                                            "--init-from", "{C}/hfs"], "x")]
    index = json.loads(read(B / "hf-sharded/model.safetensors.index.json"))
    t_first = sorted(index["weight_map"])[0]
    shard_a, shard_b = sorted(set(index["weight_map"].values()))

    def idx_case(label, edit, exp):
        out = []
        for clabel, args, _ in idx_consumers:
            def prepare(cdir, base, edit=edit):
                shutil.copytree(base / "hf-sharded", cdir / "hfs")
                edit(cdir / "hfs")
            out.append(Case("files", "files/hf-index", f"model.safetensors.index.json: {label} -> {clabel}", args, exp,
                            prepare=prepare))
        return out

    def wm(fn):
        def edit(folder):
            p = folder / "model.safetensors.index.json"
            h = json.loads(p.read_text())
            fn(h)
            p.write_text(json.dumps(h))
        return edit

    def raw(data):
        return lambda folder: write(folder / "model.safetensors.index.json", data)
    for label, edit, exp in [
            ("weight_map emptied", wm(lambda h: h.__setitem__("weight_map", {})), "reject"),
            ("weight_map a list", wm(lambda h: h.__setitem__("weight_map", [1])), "reject"),
            ("a tensor mapped to a missing file", wm(lambda h: h["weight_map"].__setitem__(t_first, "nope.safetensors")), "reject"),
            ("a tensor mapped to '../hf/model.safetensors'", wm(lambda h: h["weight_map"].__setitem__(t_first, "../hf/model.safetensors")), "reject"),
            ("a tensor mapped to '..'", wm(lambda h: h["weight_map"].__setitem__(t_first, "..")), "reject"),
            ("a tensor mapped to the index itself", wm(lambda h: h["weight_map"].__setitem__(t_first, "model.safetensors.index.json")), "reject"),
            ("a tensor mapped to the other shard", wm(lambda h: h["weight_map"].__setitem__(t_first, shard_b if h["weight_map"][t_first] == shard_a else shard_a)), "reject"),
            ("a tensor left out", wm(lambda h: h["weight_map"].pop(t_first)), "reject"),
            ("a tensor that no shard holds", wm(lambda h: h["weight_map"].__setitem__("model.extra.weight", shard_a)), "reject"),
            ("a file name a number", wm(lambda h: h["weight_map"].__setitem__(t_first, 7)), "reject"),
            ("a file name of 100000 characters", wm(lambda h: h["weight_map"].__setitem__(t_first, "f" * 100000)), "reject"),
            ("nested 100000 deep", raw(deep(100000)), "reject"),
            ("not JSON", raw("{\"weight_map\": "), "reject"),
            ("empty", raw(""), "reject"),
            ("a shard removed", lambda f: (f / shard_b).unlink(), "reject"),
            ("the two shards' names swapped", lambda f: (os.rename(f / shard_a, f / "t"), os.rename(f / shard_b, f / shard_a),
                                                         os.rename(f / "t", f / shard_b)), "reject"),
            ("a shard replaced by a folder", lambda f: ((f / shard_a).unlink(), (f / shard_a).mkdir()), "reject"),
            ("a shard replaced by a FIFO", lambda f: ((f / shard_a).unlink(), os.mkfifo(f / shard_a)), "reject"),
            ("a shard a symlink to /dev/zero", lambda f: ((f / shard_a).unlink(), os.symlink("/dev/zero", f / shard_a)), "reject"),
            ("a model.safetensors beside the index (the index wins)", lambda f: shutil.copy(f.parent.parent.parent / "base/weights.safetensors", f / "model.safetensors"), "either")]:
        cases += idx_case(label, edit, exp)

    # tokenizer_config.json beside a tokenizer.json: its bos and eos tokens.
    if base.hf_tokenizers:
        tdir = base.hf_tokenizers[0]
        tc_consumers = [("tokenize --model DIR", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", "{C}/tk"], "x"),
                        ("train --tokenizer DIR --save", train_args("--vocab", "600", "--tokenizer", "{C}/tk", "--save", "{C}/s", steps="1"), "x")]
        for label, text, exp in [("bos_token 123", '{"bos_token": 123, "eos_token": "<|endoftext|>"}', "either"),
                                 ("eos_token a token not in the vocabulary", '{"eos_token": "<never-seen>"}', "either"),
                                 ("eos_token an object without content", '{"eos_token": {"__type": "AddedToken"}}', "either"),
                                 ("nested 100000 deep", deep(100000), "either"),
                                 ("not JSON", "{", "either"), ("empty", "", "either"),
                                 ("eos_token of 100000 characters", json.dumps({"eos_token": "e" * 100000}), "either")]:
            for clabel, args, _ in tc_consumers:
                def prepare(cdir, base, text=text):
                    shutil.copytree(base / tdir, cdir / "tk")
                    write(cdir / "tk/tokenizer_config.json", text)
                cases.append(Case("files", "files/tokenizer", f"tokenizer_config.json: {label} -> {clabel}", args, exp,
                                  prepare=prepare))

    # Chrome traces: trace analyze, merge, diff. Field rules from profile/trace_json.cpp's docs.
    for tr in base.traces:
        consumers = [("trace analyze", ["trace", "analyze", "{F}"], "x"),
                     ("trace analyze --json", ["trace", "analyze", "{F}", "--json"], "x"),
                     ("trace merge", ["trace", "merge", "{C}/merged.json", "{F}", "{B}/" + tr], "merge"),
                     ("trace diff", ["trace", "diff", "{B}/" + tr, "{F}"], "x")]
        doc = json.loads(read(B / tr))
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        xi = next(i for i, e in enumerate(events) if e.get("ph") == "X")

        def te(key, value, xi=xi):
            def f(d):
                h = json.loads(d)
                ev = h["traceEvents"] if isinstance(h, dict) else h
                ev[xi][key] = value
                return json.dumps(h).encode()
            return f

        def tx(edit):
            def f(d):
                h = json.loads(d)
                edit(h["traceEvents"] if isinstance(h, dict) else h)
                return json.dumps(h).encode()
            return f
        edits = [
            ("dur -1", te("dur", -1), "reject"), ("dur 1e19", te("dur", 1e19), "reject"),
            ("dur 'long'", te("dur", "long"), "reject"), ("dur null", te("dur", None), "reject"),
            ("dur 1e17 (in range)", te("dur", 1e17), "either"), ("ts 1e19", te("ts", 1e19), "reject"),
            ("ts -1e19", te("ts", -1e19), "reject"), ("ts 'now'", te("ts", "now"), "reject"),
            ("ts 9.9e17 (in range)", te("ts", 9.9e17), "either"), ("ts -9.9e17 (in range)", te("ts", -9.9e17), "either"),
            ("pid 1.5", te("pid", 1.5), "reject"), ("pid 2^64-1", te("pid", 2**64 - 1), "reject"),
            ("pid 'zero'", te("pid", "zero"), "reject"), ("tid 1.5", te("tid", 1.5), "reject"),
            ("tid 'main' (a string is allowed)", te("tid", "main"), "either"),
            ("name 7", te("name", 7), "reject"), ("cat []", te("cat", []), "reject"),
            ("args []", te("args", []), "reject"), ("args.correlation 'x'", te("args", {"correlation": "x"}), "reject"),
            ("args.correlation 2^64", te("args", {"correlation": 2**64}), "reject"),
            ("ph removed", tx(lambda ev: ev[xi].pop("ph")), "reject"), ("ph 5", te("ph", 5), "reject"),
            ("ts removed from an X event", tx(lambda ev: ev[xi].pop("ts")), "reject-analysis"),
            ("events x 2000", tx(lambda ev: ev.extend(ev * 2000 if len(ev) < 100 else ev * 40)), "either"),
            ("every event removed", tx(lambda ev: ev.clear()), "either"),
            ("traceEvents an object", lambda d: b'{"traceEvents": {"a": 1}}', "reject"),
            ("a bare array of events", lambda d: json.dumps(events).encode(), "either"),
            ("nested 100000 deep", lambda d: deep(100000).encode(), "reject"),
            ("an event's args nested 100000 deep", lambda d, xi=xi: te("args", {"x": "DEEP"})(d).replace(b'"DEEP"', deep(100000).encode()), "reject"),
            ("a number 1e400", lambda d, xi=xi: te("dur", "BIG")(d).replace(b'"BIG"', b"1e400"), "reject"),
            ("NaN", lambda d, xi=xi: te("dur", "BIG")(d).replace(b'"BIG"', b"NaN"), "reject"),
            ("truncated by half", lambda d: d[: len(d) // 2], "reject"),
            ("empty", lambda d: b"", "reject"),
            ("invalid UTF-8 in a name", lambda d, xi=xi: te("name", "NAME")(d).replace(b'"NAME"', b'"\xff\xfe"'), "reject"),
            ("a name of 1 MB", te("name", "k" * (1 << 20)), "either"),
        ]
        for i in range(6):
            c = [1, 2, 4, 8, 32, 128][i]
            edits.append((f"{c} flipped bytes", lambda d, c=c, s=rng.random(): flip_bytes(d, random.Random(s), c)[0], "either"))
        for label, fn, exp in edits:
            # merge copies events through: only the analysis needs an "X" event's ts and dur
            cases += file_case("files/trace", f"{tr}: {label}", consumers, fn,
                               lambda k, e=exp: ("either" if k == "merge" else "reject") if e == "reject-analysis" else e, tr)

    # ncu CSV exports: roofline --ncu-csv.
    for csv in base.ncu:
        consumers = [("roofline", ["roofline", "--ncu-csv", "{F}"], "x"),
                     ("roofline --json --svg", ["roofline", "--ncu-csv", "{F}", "--json", "{C}/r.json", "--svg", "{C}/r.svg"], "x")]
        lines = read(B / csv).split(b"\n")
        hi = next(i for i, l in enumerate(lines) if l.startswith(b'"ID"'))
        head = [c.strip(b'"') for c in lines[hi].split(b'","')]
        col = head.index(b"gpu__time_duration.sum")
        units_row = hi + 1 if lines[hi + 1].startswith(b'""') or lines[hi + 1].startswith(b'"",') else None
        first_row = (units_row or hi) + 1

        def set_cell(line, value, col=col):
            cells = line.split(b'","')
            if len(cells) <= col:
                return line
            cells[col] = value if col != len(cells) - 1 else value + b'"'
            return b'","'.join(cells)

        def cell(row, value):
            def f(d):
                ls = d.split(b"\n")
                ls[row] = set_cell(ls[row], value)
                return b"\n".join(ls)
            return f
        edits = [("duration -1", cell(first_row, b"-1"), "reject"),
                 ("duration nan", cell(first_row, b"nan"), "reject"),
                 ("duration inf", cell(first_row, b"inf"), "reject"),
                 ("duration 1e400", cell(first_row, b"1e400"), "reject"),
                 ("duration 'fast'", cell(first_row, b"fast"), "reject"),
                 ("duration empty", cell(first_row, b""), "reject"),
                 ("duration 1e300 (finite)", cell(first_row, b"1e300"), "either"),
                 ("duration 1.7e308 in every row (sums overflow)", lambda d, fr=first_row: b"\n".join(
                     set_cell(l, b"1.7e308") if i >= fr else l for i, l in enumerate(d.split(b"\n"))), "either"),
                 ("kernel name 1 MB", lambda d: d.replace(b"pylon", b"p" * (1 << 20), 1), "either"),
                 ("kernel name invalid UTF-8", lambda d: d.replace(b"pylon", b"\xff\xfepy", 1), "either"),
                 ("rows x 3000", lambda d: b"\n".join(lines[:first_row] + lines[first_row:first_row + 1] * 3000 + lines[first_row:]), "either"),
                 ("header only", lambda d: b"\n".join(lines[:first_row]), "reject"),
                 ("empty", lambda d: b"", "reject"),
                 ("an unbalanced quote", lambda d: d.replace(b'","', b'",', 1), "reject"),
                 ("truncated by half", lambda d: d[: len(d) // 2], "either"),
                 ("a field of 1 MB without quotes closing", lambda d: d + b'\n"' + b"x" * (1 << 20), "reject")]
        if units_row is not None:
            edits += [("duration unit 'furlong'", cell(units_row, b"furlong"), "reject"),
                      ("duration unit of 100001 characters", cell(units_row, b"u" * 100001), "reject")]
        for i in range(6):
            c = [1, 2, 4, 16, 64, 256][i]
            edits.append((f"{c} flipped bytes", lambda d, c=c, s=rng.random(): flip_bytes(d, random.Random(s), c)[0], "either"))
        for label, fn, exp in edits:
            cases += file_case("files/ncu-csv", f"{csv}: {label}", consumers, fn, lambda k, e=exp: e, csv)

    # Special files in place of every input: a FIFO (no writer), a folder, an empty file,
    # /dev/null, /dev/zero, a missing path, a path with a newline, a symlink loop.
    slots = [("train --data", train_args("--data", "{S}")), ("train --val-data", train_args("--val-data", "{S}", "--eval-every", "1")),
             ("train --tokenizer", train_args("--tokenizer", "{S}")), ("train --init-from", train_args("--init-from", "{S}")),
             ("train --resume", train_args("--resume", "{S}")), ("eval --model", eval_args(model="{S}")),
             ("eval --data", eval_args(data="{S}")), ("generate --model", generate_args("{S}")),
             ("generate --tokenizer", generate_args(CKPT, "--tokenizer", "{S}")),
             ("export --model", export_args("{S}")), ("export --tokenizer", export_args(CKPT, "--tokenizer", "{S}")),
             ("tokenize --input", ["tokenize", "--input", "{S}", "--out", "{C}/t.bin", "--model", SPM]),
             ("tokenize --model", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", "{S}"]),
             ("inspect", ["inspect", "{S}"]), ("inspect --verify", ["inspect", "--verify", "{S}"]),
             ("trace analyze", ["trace", "analyze", "{S}"]), ("trace merge", ["trace", "merge", "{C}/m.json", "{S}"]),
             ("trace diff", ["trace", "diff", "{B}/trace.json", "{S}"]), ("roofline --ncu-csv", ["roofline", "--ncu-csv", "{S}"])]
    specials = [("a FIFO without a writer", "fifo"), ("an empty folder", "dir"), ("an empty file", "empty"),
                ("/dev/null", "devnull"), ("/dev/zero", "devzero"), ("a missing path", "missing"),
                ("a missing path with a newline in its name", "newline"), ("a symlink loop", "loop"),
                ("a folder of junk", "junkdir")]
    for slabel, args in slots:
        for label, kind in specials:
            if slabel == "tokenize --input" and kind in ("fifo", "devzero"):
                continue  # it streams its input, like cat: a pipe is waited on by design
            exp = "reject"
            if slabel == "tokenize --input" and kind in ("empty", "devnull"):
                exp = "either"

            def prepare(cdir, base, kind=kind):
                if kind == "fifo":
                    os.mkfifo(cdir / "in")
                elif kind == "dir":
                    (cdir / "in").mkdir()
                elif kind == "empty":
                    write(cdir / "in", b"")
                elif kind == "loop":
                    os.symlink(cdir / "in", cdir / "in")
                elif kind == "junkdir":
                    (cdir / "in").mkdir()
                    for n, data in (("latest", b"../../../../etc"), ("config.json", b"{"), ("model.safetensors", b"\0" * 9),
                                    ("checksums.json", b"[]"), ("layout.json", b"{}")):
                        write(cdir / "in" / n, data)
            target = {"devnull": "/dev/null", "devzero": "/dev/zero", "missing": "{C}/no/such/file",
                      "newline": "{C}/no\nsuch"}.get(kind, "{C}/in")
            cases.append(Case("files", "files/special", f"{slabel} given {label}",
                              [a.replace("{S}", target) for a in args], exp, prepare=prepare))
    # Outputs where they cannot go.
    outs = [("export --out a folder", export_args(CKPT, "--out", "{C}/d"), "dir"),
            ("export --out under a file", export_args(CKPT, "--out", "{C}/f/x.edge"), "file"),
            ("export --out in a missing folder", export_args(CKPT, "--out", "{C}/no/x.edge"), None),
            ("train --save under a file", train_args("--save", "{C}/f/ckpt"), "file"),
            ("train --metrics a folder", train_args("--metrics", "{C}/d"), "dir"),
            ("train --profile under a file", train_args("--profile", "{C}/f/p"), "file"),
            ("tokenize --out a folder", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/d", "--model", SPM], "dir"),
            ("tokenize --model-out under a file", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin",
                                                   "--train-vocab", "300", "--model-out", "{C}/f/m"], "file"),
            ("trace merge OUT a folder", ["trace", "merge", "{C}/d", "{B}/trace.json"], "dir"),
            ("roofline --json a folder", ["roofline", "--ncu-csv", "{B}/" + (base.ncu[0] if base.ncu else "x.csv"), "--json", "{C}/d"], "dir"),
            ("train --save with a 5000-character name", train_args("--save", "{C}/" + "n" * 5000), None)]
    for label, args, kind in outs:
        def prepare(cdir, base, kind=kind):
            if kind == "dir":
                (cdir / "d").mkdir()
            elif kind == "file":
                write(cdir / "f", b"x")
        cases.append(Case("files", "files/outputs", label, args, "reject", prepare=prepare))
    return cases


def _deepen_safetensors(data):
    n, _ = safetensors_parts(data)
    text = data[8:8 + n]
    if b'"DEEP"' not in text:
        return data
    text = text.replace(b'"DEEP"', deep(50000).encode())
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


# ----------------------------------------------------------------------------------------------
# (2) flags: every numeric flag's boundaries and absurd values, choices, unknown flags


FLAG_LINE = re.compile(r"^  --([a-z0-9-]+)( X| N)?\s+(.*)$")
RANGE = re.compile(r"\[range: (>= \S+|> \S+|[\[(][^,\]]+, [^\])]+[\])])\]")


class Flag:
    def __init__(self, command, name, rng_text):
        self.command, self.name, self.range_text = command, name, rng_text
        self.kind = None  # i32, i64, f32, f64
        r = rng_text
        if r.startswith(">="):
            self.lo, self.lo_open, self.hi, self.hi_open = float(r[3:]), False, None, False
        elif r.startswith(">"):
            self.lo, self.lo_open, self.hi, self.hi_open = float(r[2:]), True, None, False
        else:
            lo, hi = r[1:-1].split(", ")
            self.lo, self.hi = float(lo), float(hi)
            self.lo_open, self.hi_open = r[0] == "(", r[-1] == ")"

    def contains(self, v):
        if (v <= self.lo) if self.lo_open else (v < self.lo):
            return False
        return self.hi is None or ((v < self.hi) if self.hi_open else (v <= self.hi))


INT_TEXT = re.compile(r"[+-]?[0-9]+")
REAL_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
FLT_MAX, FLT_MIN, DBL_MIN = 3.4028234663852886e38, 1.1754943508222875e-38, 2.2250738585072014e-308


def flag_value_expect(flag, text):
    """'accept' when docs/cli.md's rules take `text` for this flag (a number of its type inside its
    range), else 'reject'; 'either' where the docs say nothing (leading blanks)."""
    if text[:1].isspace():
        return "either"
    if flag.kind in ("i32", "i64"):
        if not INT_TEXT.fullmatch(text):
            return "reject"
        v = int(text)
        if not (-2**63 <= v < 2**63) or (flag.kind == "i32" and not (-2**31 <= v < 2**31)):
            return "reject"
        return "accept" if flag.contains(float(v)) else "reject"
    if not REAL_TEXT.fullmatch(text):
        return "reject"  # nan, inf, hex, empty, garbage
    try:
        v = float(text)
    except (ValueError, OverflowError):
        return "reject"
    if math.isinf(v) or (v != 0 and abs(v) < DBL_MIN):
        return "reject"
    if flag.kind == "f32" and (abs(v) > FLT_MAX or (v != 0 and abs(v) < FLT_MIN)):
        return "reject"
    return "accept" if flag.contains(v) else "reject"


# Where each command's flag is tried, and what else the flag needs to matter.
def flag_context(command, name):
    if command == "train":
        extra = {"eval-steps": ["--val-data", VAL, "--eval-every", "1"],
                 "profile-wait": ["--profile", "{C}/prof"], "profile-warmup": ["--profile", "{C}/prof"],
                 "profile-active": ["--profile", "{C}/prof"], "save-every": ["--save", "{C}/ckpt"],
                 "nnodes": ["--dist-timeout", "3"], "node-rank": ["--dist-timeout", "3"],
                 "kv-heads": ["--preset", "llama"], "head-dim": ["--preset", "llama"], "ffn-dim": ["--preset", "llama"],
                 "warmup": ["--lr-schedule", "cosine"], "min-lr-frac": ["--lr-schedule", "cosine"]}.get(name, [])
        return replace_flags(train_args(), extra)
    if command == "eval":
        return eval_args() if name != "heads" else eval_args(model="{B}/weights-nometa.safetensors")
    if command == "generate":
        return generate_args()
    if command == "export":
        return export_args()
    if command == "tokenize":
        if name == "train-vocab":
            return ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin"]
        return ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", SPM]
    if command == "roofline":
        return ["roofline", "--ncu-csv", "{B}/ncu.csv", "--json", "{C}/r.json", "--svg", "{C}/r.svg"]
    if command == "trace":
        return ["trace", "diff", "{B}/trace.json", "{B}/trace.json"]
    raise KeyError(command)


def replace_flags(args, extra):
    """args with each --flag of `extra` set to its value there (replaced, or appended)."""
    out = list(args)
    i = 0
    while i < len(extra):
        name = extra[i]
        val = extra[i + 1] if i + 1 < len(extra) and not extra[i + 1].startswith("--") else None
        if name in out:
            j = out.index(name)
            if val is not None:
                out[j + 1] = val
        else:
            out += [name] + ([val] if val is not None else [])
        i += 2 if val is not None else 1
    return out


def drop_flag(args, name):
    """args without `name` and its value."""
    if name not in args:
        return list(args)
    i = args.index(name)
    return args[:i] + args[i + 2:]


def probe_flags(binary, env):
    """Each numeric flag of each command, from `pylon COMMAND --help` ([range: R]), and its type:
    a value of `1.5` refused as not an integer, `1e-300` as too small for a float, `2^31` as
    outside 32 bits (probed as `--flag V --help`, which parses the flags and does nothing)."""
    flags = []
    for command in ("train", "eval", "generate", "export", "tokenize", "roofline", "trace"):
        text = subprocess.run([binary, command, "--help"], capture_output=True, env=env, text=True).stdout
        for line in text.splitlines():
            m = FLAG_LINE.match(line)
            if not m:
                continue
            r = RANGE.search(m.group(3))
            if r:
                flags.append(Flag(command, m.group(1), r.group(1)))

    def probe(f, value):
        args = [binary, f.command] + (["diff"] if f.command == "trace" else []) + [f"--{f.name}", value, "--help"]
        return subprocess.run(args, capture_output=True, env=env, text=True).stderr
    for f in flags:
        said = probe(f, "1.5")
        if "expected an integer" in said or "must be an integer" in said:
            f.kind = "i32" if "32-bit integer" in probe(f, "2147483648") else "i64"
        else:
            f.kind = "f32" if "32-bit float" in probe(f, "1e-300") else "f64"
    return flags


ABSURD = ["0", "-1", "1", "-0", "2", "2147483647", "2147483648", "-2147483648", "4294967296", "9223372036854775807",
          "9223372036854775808", "-9223372036854775809", "99999999999999999999", "nan", "-nan", "NaN", "inf", "-inf",
          "Infinity", "1e-300", "1e-310", "1e-39", "1.17e-38", "3.4e38", "3.5e38", "1e39", "1e308", "1e400", "-1e400",
          "1.5", "0.5", "0.999999", "1e3", "0x10", "0x1p-3", "010", "", "abc", "1,5", "1_000", "+1", "--1",
          "\uff11", " 1", "1 ", "1e", "e1", ".", "-", "5x", "0.0000001"]


def boundary_values(f):
    vals = [f.lo]
    step = 1 if f.kind in ("i32", "i64") else max(abs(f.lo), 1) * 1e-6
    vals += [f.lo - step, f.lo + step]
    if f.hi is not None:
        vals += [f.hi, f.hi - step, f.hi + step]
    out = []
    for v in vals:
        out.append(str(int(v)) if f.kind in ("i32", "i64") else repr(float(v)))
    return out


# Flag values that ask for work without bound (more steps, more tokens): still running at the
# time limit while printing progress is what they mean. Larger ones than these are skipped:
# --nproc-per-node N starts N processes on this machine, --nnodes N waits for N machines.
HEAVY_SKIP = {("train", "nproc-per-node"): 4}
LONG_TIMEOUT = 10


def gen_flags(base, rng, flags):
    cases = []
    for f in flags:
        values = list(dict.fromkeys(ABSURD + boundary_values(f)))
        r = random.Random(rng.random())
        for _ in range(4):  # seeded random values of every magnitude
            values.append(str(r.choice([-1, 1]) * r.randrange(0, 10 ** r.randrange(1, 20))))
            values.append(f"{r.choice(['', '-'])}{r.uniform(1, 10):.6g}e{r.randint(-330, 330)}")
        values = list(dict.fromkeys(values))
        for v in values:
            exp = flag_value_expect(f, v)
            cap = HEAVY_SKIP.get((f.command, f.name))
            if cap is not None and exp == "accept" and int(v) > cap:
                continue
            args = replace_flags(flag_context(f.command, f.name), [f"--{f.name}", "VALUE"])
            args[args.index("VALUE")] = v
            if f.command == "train" and f.name == "node-rank" and exp == "accept" and int(v) >= 1:
                exp = "reject"  # docs/cli.md: this machine's index in 0..nnodes-1 (here --nnodes 1)
            timeout = None
            if exp == "accept":
                try:
                    if abs(float(v)) >= 1e5:
                        timeout = LONG_TIMEOUT
                except ValueError:
                    pass
            cases.append(Case("flags", f"flags/{f.command}", f"{f.command} --{f.name} {v!r} (range {f.range_text}, {f.kind})",
                              args, exp, timeout=timeout))
            if v in ("-1", boundary_values(f)[0]):  # the --name=value form, outside and at the bound
                cases.append(Case("flags", f"flags/{f.command}", f"{f.command} --{f.name}={v} (= form)",
                                  drop_flag(flag_context(f.command, f.name), f"--{f.name}") + [f"--{f.name}={v}"], exp,
                                  timeout=timeout))
        cases.append(Case("flags", f"flags/{f.command}", f"{f.command} --{f.name}= (empty, = form)",
                          flag_context(f.command, f.name) + [f"--{f.name}="], "reject"))
        cases.append(Case("flags", f"flags/{f.command}", f"{f.command} --{f.name} without a value (last)",
                          flag_context(f.command, f.name) + [f"--{f.name}"], "reject"))
        cases.append(Case("flags", f"flags/{f.command}", f"{f.command} --{f.name} given twice",
                          flag_context(f.command, f.name) + [f"--{f.name}", "1", f"--{f.name}", "1"], "reject"))
    # Choices, unknown flags and commands, conflicting flags.
    t, e, g, x = train_args(), eval_args(), generate_args(), export_args()
    tok = ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--model", SPM]
    odd = [
        ("train --preset gpt5", replace_flags(t, ["--preset", "gpt5"]), "reject"),
        ("train --preset ''", replace_flags(t, ["--preset", ""]), "reject"),
        ("train --lr-schedule linear", replace_flags(t, ["--lr-schedule", "linear"]), "reject"),
        ("train --device cuda (no CUDA in this build)", replace_flags(t, ["--device", "cuda"]), "reject"),
        ("train --device tpu", replace_flags(t, ["--device", "tpu"]), "reject"),
        ("train --dtype bf16 on the CPU", replace_flags(t, ["--dtype", "bf16"]), "reject"),
        ("train --recompute full on the CPU", replace_flags(t, ["--recompute", "full"]), "reject"),
        ("train --reduce-dtype bf16 on the CPU", replace_flags(t, ["--reduce-dtype", "bf16"]), "reject"),
        ("train --profile-roofline on the CPU", replace_flags(t, ["--profile", "{C}/p", "--profile-roofline"]), "reject"),
        ("train --preset causal --kv-heads 2", replace_flags(t, ["--kv-heads", "2"]), "reject"),
        ("train --dim 30 --heads 4 (not divisible)", replace_flags(t, ["--dim", "30"]), "reject"),
        ("train --preset llama --heads 4 --kv-heads 3", replace_flags(t, ["--preset", "llama", "--kv-heads", "3"]), "reject"),
        ("train --vocab 100 (tokens up to 299)", replace_flags(t, ["--vocab", "100"]), "reject"),
        ("train --init-from a folder with --dim", replace_flags(t, ["--init-from", "{B}/hf", "--dim", "32"]), "reject"),
        ("train --resume a save dir of another model", replace_flags(t, ["--resume", "{B}/llama", "--steps", "3"]), "reject"),
        ("train --resume with --steps below the checkpoint's", replace_flags(t, ["--resume", CKPT, "--steps", "1"]), "either"),
        ("eval --device vulkan (no Vulkan in this build)", replace_flags(e, ["--device", "vulkan"]), "reject"),
        ("eval --device vulkan:99999999999", replace_flags(e, ["--device", "vulkan:99999999999"]), "reject"),
        ("eval --device cuda", replace_flags(e, ["--device", "cuda"]), "reject"),
        ("eval --weights-path zerocopy", replace_flags(e, ["--weights-path", "zerocopy"]), "reject"),
        ("eval --heads 8 disagreeing with the metadata", replace_flags(e, ["--heads", "8"]), "reject"),
        ("eval --preset seed disagreeing with the metadata", replace_flags(e, ["--preset", "seed"]), "reject"),
        ("generate --vulkan-decode fast", replace_flags(g, ["--vulkan-decode", "fast"]), "reject"),
        ("generate --max-new-tokens 100 --context 64 (no room)", replace_flags(g, ["--max-new-tokens", "100"]), "reject"),
        ("generate --prompt of 120 kB (over --context)", replace_flags(g, ["--prompt", "the " * 30000]), "reject"),
        ("generate --prompt invalid UTF-8", replace_flags(g, ["--prompt", os.fsdecode(b"\xff\xfe")]), "either"),
        ("generate --prompt ''", replace_flags(g, ["--prompt", ""]), "either"),
        ("export --quant int3", replace_flags(x, ["--quant", "int3"]), "reject"),
        ("export --group-size 48", replace_flags(x, ["--group-size", "48"]), "reject"),
        ("export --group-size 64 --quant f16", replace_flags(x, ["--quant", "f16", "--group-size", "64"]), "either"),
        ("tokenize --model with --train-vocab", tok + ["--train-vocab", "300"], "reject"),
        ("tokenize --width u8", tok + ["--width", "u8"], "reject"),
        ("tokenize --width u16 --train-vocab 70000", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin",
                                                     "--width", "u16", "--train-vocab", "70000"], "reject"),
        ("tokenize --train-vocab 1", ["tokenize", "--input", "{B}/text.txt", "--out", "{C}/t.bin", "--train-vocab", "1"], "reject"),
        ("inspect with two files", ["inspect", "{B}/int4.edge", "{B}/f16.edge"], "reject"),
        ("inspect without a file", ["inspect"], "reject"),
        ("inspect --model and a bare file", ["inspect", "--model", "{B}/int4.edge", "{B}/f16.edge"], "reject"),
        ("trace without a subcommand", ["trace"], "reject"),
        ("trace frobnicate", ["trace", "frobnicate", "{B}/trace.json"], "reject"),
        ("trace merge without inputs", ["trace", "merge", "{C}/m.json"], "reject"),
        ("trace merge OUT equal to IN", ["trace", "merge", "{C}/t.json", "{C}/t.json"], "reject"),
        ("trace diff with one file", ["trace", "diff", "{B}/trace.json"], "reject"),
        ("trace analyze with two files", ["trace", "analyze", "{B}/trace.json", "{B}/trace.json"], "reject"),
        ("trace diff --top on analyze", ["trace", "analyze", "{B}/trace.json", "--top", "3"], "reject"),
        ("roofline without input", ["roofline"], "reject"),
        ("roofline --ncu-csv and a program", ["roofline", "--ncu-csv", "{B}/ncu.csv", "--", "pylon", "train"], "reject"),
        ("roofline -- a program on a build without CUPTI", ["roofline", "--", "pylon", "train", "--steps", "1"], "reject"),
        ("roofline -- a command that is not pylon's", ["roofline", "--", "/bin/sh", "-c", "true"], "reject"),
        ("roofline --device 'no such GPU'", ["roofline", "--ncu-csv", "{B}/ncu.csv", "--device", "no such GPU"], "either"),
        ("roofline --peak-tflops 1e300 --svg (infinite once scaled)",
         ["roofline", "--ncu-csv", "{B}/ncu.csv", "--peak-tflops", "1e300", "--svg", "{C}/r.svg"], "reject"),
        ("roofline --peak-gbs 1e308 --svg", ["roofline", "--ncu-csv", "{B}/ncu.csv", "--peak-gbs", "1e308", "--svg", "{C}/r.svg"], "reject"),
        ("an unknown command", ["frobnicate"], "reject"),
        ("a command in capitals", ["TRAIN"], "reject"),
        ("an empty command", [""], "reject"),
    ]
    for cmd, args in (("train", t), ("eval", e), ("generate", g), ("export", x), ("tokenize", tok),
                      ("inspect", ["inspect", "{B}/int4.edge"]), ("trace", ["trace", "analyze", "{B}/trace.json"]),
                      ("roofline", ["roofline", "--ncu-csv", "{B}/ncu.csv"])):
        odd += [(f"{cmd} --bogus-flag 1", args + ["--bogus-flag", "1"], "reject"),
                (f"{cmd} --bogus-switch", args + ["--bogus-switch"], "reject"),
                (f"{cmd} -x", args + ["-x"], "reject"),
                (f"{cmd} a stray positional", args + ["stray"], "reject" if cmd not in ("trace",) else "reject"),
                (f"{cmd} --", args + ["--"], "reject" if cmd != "roofline" else "reject"),
                (f"{cmd} ---triple-dash", args + ["---triple-dash"], "reject"),
                (f"{cmd} a 120 kB flag name", args + ["--" + "f" * 120000], "reject"),
                (f"{cmd} a flag with invalid UTF-8", args + [os.fsdecode(b"--\xff\xfe")], "reject"),
                (f"{cmd} a flag with a newline", args + ["--bad\nflag"], "reject")]
    for label, args, exp in odd:
        cases.append(Case("flags", "flags/other", label, args, exp))
    return cases


# ----------------------------------------------------------------------------------------------
# (3) environment variables (docs/environment.md)


def gen_env(base, rng):
    cases = []
    t = train_args("--dist-timeout", "3")
    ints = ["abc", "", "-1", "-2", "1", "2", "1.5", "0x10", " 1", "1 ", "99999999999999999999", "2147483648",
            "16777216", "16777217", "1099511627776", "1099511627777", "1e3", "\u0661", "nan", "0", "3600000", "3600001"]
    # (variable, what else it needs, its range as Pylon reads it, the values that also make sense
    # with the rest: one rank of a world of one). In range but not sensible (WORLD_SIZE=2 with no
    # peer) is 'accept': a clean refusal is right, exit 0 is not possible.
    specs = [("RANK", {"WORLD_SIZE": "1"}, 0, 2**24, {0}),
             ("WORLD_SIZE", {"RANK": "0"}, 1, 2**24, None),
             ("LOCAL_RANK", {"RANK": "0", "WORLD_SIZE": "1"}, 0, 2**24, None),
             ("LOCAL_WORLD_SIZE", {"RANK": "0", "WORLD_SIZE": "1"}, 1, 2**24, {1}),
             ("MASTER_PORT", {}, 1, 65535, None),
             ("OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE": "1"}, 0, 2**24, {0}),
             ("OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_RANK": "0"}, 1, 2**24, None),
             ("SLURM_PROCID", {"SLURM_NTASKS": "1"}, 0, 2**24, {0}),
             ("SLURM_NTASKS", {"SLURM_PROCID": "0"}, 1, 2**24, None),
             ("PYLON_TEST_CRASH_RANK", {}, -1, 2**20, None),
             ("PYLON_TEST_CRASH_STEP", {}, 1, 2**40, None),
             ("PYLON_TEST_HANG_RANK", {}, -1, 2**20, None),
             ("PYLON_TEST_HANG_STEP", {}, 1, 2**40, None),
             ("PYLON_TEST_PROGRESS_MS", {}, 1, 3600000, None)]
    for var, others, lo, hi, sensible in specs:
        for value in ints:
            if value == "0" and var in ("PYLON_TEST_CRASH_RANK", "PYLON_TEST_HANG_RANK"):
                continue  # rank 0 of one: the fault itself (the faults class runs those)
            if value == "":
                exp = "either"  # empty is unset
            elif value[:1].isspace():
                exp = "either"  # leading blanks: strtoll's business, the docs say nothing
            elif not INT_TEXT.fullmatch(value) or not (lo <= int(value) <= hi):
                exp = "reject"
            elif sensible is not None and int(value) not in sensible:
                exp = "reject"
            else:
                exp = "accept"
            args = t if var != "PYLON_TEST_PROGRESS_MS" else replace_flags(t, ["--val-data", VAL, "--eval-every", "1"])
            cases.append(Case("env", f"env/{var}", f"{var}={value!r}" + "".join(f" {k}={v}" for k, v in others.items()),
                              args, exp, env={var: value, **others}))
    # Combinations the documentation describes.
    combos = [
        ("RANK without WORLD_SIZE", {"RANK": "0"}, t, "reject"),
        ("WORLD_SIZE without RANK", {"WORLD_SIZE": "1"}, t, "reject"),
        ("RANK=1 WORLD_SIZE=1", {"RANK": "1", "WORLD_SIZE": "1"}, t, "reject"),
        ("RANK=0 WORLD_SIZE=0", {"RANK": "0", "WORLD_SIZE": "0"}, t, "reject"),
        ("LOCAL_WORLD_SIZE=2 in a world of 1", {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "2"}, t, "reject"),
        ("LOCAL_RANK=3 of LOCAL_WORLD_SIZE=2", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, t, "reject"),
        ("RANK=0 WORLD_SIZE=2 and no peer (--dist-timeout 3)", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "PORT"}, t, "reject"),
        ("RANK=1 WORLD_SIZE=2 and no rank 0 (--dist-timeout 3)", {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "PORT"}, t, "reject"),
        ("WORLD_SIZE=16777216, one rank (--dist-timeout 3)", {"RANK": "0", "WORLD_SIZE": "16777216", "MASTER_PORT": "PORT"}, t, "reject"),
        ("two nodes without MASTER_ADDR", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_PORT": "PORT"}, t, "reject"),
        ("MASTER_ADDR unresolvable (--dist-timeout 3)", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
                                                         "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "PORT"}, t, "reject"),
        ("MASTER_ADDR of 10000 characters", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a" * 10000, "MASTER_PORT": "PORT"}, t, "reject"),
        ("MASTER_ADDR=999.1.1.1", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "999.1.1.1", "MASTER_PORT": "PORT"}, t, "reject"),
        ("MASTER_ADDR garbage, one rank (unused)", {"MASTER_ADDR": "\u2603::1::"}, t, "either"),
        ("OMPI_COMM_WORLD_RANK without its SIZE", {"OMPI_COMM_WORLD_RANK": "0"}, t, "reject"),
        ("OMPI_COMM_WORLD_SIZE without its RANK (not a rank: ignored)", {"OMPI_COMM_WORLD_SIZE": "2"}, t, "either"),
        ("OMPI_COMM_WORLD_LOCAL_RANK=5 of LOCAL_SIZE 2", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                                                         "OMPI_COMM_WORLD_LOCAL_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, t, "reject"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE=abc", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
                                            "OMPI_COMM_WORLD_LOCAL_SIZE": "abc"}, t, "reject"),
        ("SLURM_PROCID without task counts (a batch script: ignored)", {"SLURM_PROCID": "0"}, t, "either"),
        ("SLURM_STEP_NUM_NODES=abc", {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NUM_NODES": "abc"}, t, "reject"),
        ("SLURM_LOCALID=-1", {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "-1"}, t, "reject"),
        ("SLURM 2 tasks on 2 nodes without MASTER_ADDR", {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "2"}, t, "reject"),
        ("RANK and OMPI_* disagreeing (RANK first)", {"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "3",
                                                      "OMPI_COMM_WORLD_SIZE": "4"}, t, "accept"),
        ("the launcher under RANK/WORLD_SIZE", {"RANK": "0", "WORLD_SIZE": "1"}, replace_flags(t, ["--nproc-per-node", "2"]), "reject"),
        ("the launcher with MASTER_PORT=abc", {"MASTER_PORT": "abc"}, replace_flags(t, ["--nproc-per-node", "2"]), "reject"),
        ("the launcher with MASTER_PORT=65536", {"MASTER_PORT": "65536"}, replace_flags(t, ["--nproc-per-node", "2"]), "reject"),
        ("the launcher with PYLON_TEST_CRASH_STEP=0", {"PYLON_TEST_CRASH_STEP": "0"}, replace_flags(t, ["--nproc-per-node", "2"]), "reject"),
        ("PYLON_TEST_CRASH_RANK beyond the world (inert)", {"PYLON_TEST_CRASH_RANK": "5"}, t, "accept"),
        ("PYLON_TEST_CRASH_STEP beyond the run (inert)", {"PYLON_TEST_CRASH_RANK": "0", "PYLON_TEST_CRASH_STEP": "99"}, t, "accept"),
        ("PYLON_TEST_VK_FAIL_ALLOC=abc (no Vulkan: unread)", {"PYLON_TEST_VK_FAIL_ALLOC": "abc"}, eval_args(), "either"),
        ("PYLON_VK_PIPELINE_CACHE=/dev/full (no Vulkan: unread)", {"PYLON_VK_PIPELINE_CACHE": "/dev/full"}, eval_args(), "either"),
    ]
    # The default data's cache folder: train without --data.
    nodata = [a for a in train_args() if a not in ("--data", TOK)]
    combos += [
        ("PYLON_DATA_DIR a regular file", {"PYLON_DATA_DIR": "{B}/text.txt"}, nodata, "reject"),
        ("PYLON_DATA_DIR under a regular file", {"PYLON_DATA_DIR": "{B}/text.txt/cache"}, nodata, "reject"),
        ("PYLON_DATA_DIR with an incomplete cache", {"PYLON_DATA_DIR": "{C}/cache"}, nodata, "reject"),
        ("PYLON_DATA_DIR with a cache of garbage", {"PYLON_DATA_DIR": "{C}/junk"}, nodata, "reject"),
        ("PYLON_DATA_DIR of 5000 characters", {"PYLON_DATA_DIR": "/" + "d" * 5000}, nodata, "reject"),
        ("PYLON_DATA_DIR, XDG_CACHE_HOME and HOME unset", {"PYLON_DATA_DIR": "", "XDG_CACHE_HOME": "", "HOME": ""}, nodata, "reject"),
        ("XDG_CACHE_HOME a regular file", {"PYLON_DATA_DIR": "", "XDG_CACHE_HOME": "{B}/text.txt"}, nodata, "reject"),
        ("HOME a regular file", {"PYLON_DATA_DIR": "", "XDG_CACHE_HOME": "", "HOME": "{B}/text.txt"}, nodata, "reject"),
    ]
    for value in ("abc", "0", "-1", "99999999999999999999", "1,2,3", "4096", "", "1.5"):
        combos.append((f"OMP_NUM_THREADS={value!r}", {"OMP_NUM_THREADS": value}, t, "either"))
        combos.append((f"OPENBLAS_NUM_THREADS={value!r}", {"OPENBLAS_NUM_THREADS": value}, t, "either"))
    combos.append(("OMP_NUM_THREADS=abc with 2 ranks", {"OMP_NUM_THREADS": "abc"}, replace_flags(t, ["--nproc-per-node", "2"]), "either"))
    combos.append(("LANG=tr_TR.UTF-8 and LC_ALL=C", {"LANG": "tr_TR.UTF-8", "LC_ALL": "C"}, t, "accept"))
    for label, env, args, exp in combos:
        def prepare(cdir, base, label=label):
            if "incomplete" in label:
                (cdir / "cache/fortunes-bpe4096").mkdir(parents=True)
                shutil.copy(base / "tok.bin", cdir / "cache/fortunes-bpe4096/train.bin")
            if "garbage" in label:
                for n in ("train.bin", "val.bin", "tokenizer.model"):
                    write(cdir / "junk/fortunes-bpe4096" / n, b"\x01" * 7)
        cases.append(Case("env", "env/combinations", label, args, exp, env=env, prepare=prepare))
    return cases


# ----------------------------------------------------------------------------------------------
# (4) checkpoints


CKPT_FILES = ["shard-00000-of-00002.safetensors", "shard-00001-of-00002.safetensors", "model.safetensors",
              "layout.json", "trainer.json", "tokenizer.model", "checksums.json"]
STEP = "ckpt/step_000002"


def ckpt_case(label, mutate, consumers, group="checkpoints/corrupt"):
    """mutate(step_folder_path, base) edits a fresh copy of the checkpoint in the case folder.
    consumers: (label, args, expect)."""
    out = []
    for clabel, args, exp in consumers:
        def prepare(cdir, base, mutate=mutate):
            shutil.copytree(base / "ckpt", cdir / "ckpt")
            mutate(cdir / STEP, base)
        out.append(Case("checkpoints", group, f"{label} -> {clabel}", args, exp, prepare=prepare))
    return out


def readers(exp_resume, exp_load, file_model=None):
    """--resume, and the three commands that load weights from the save directory."""
    out = [("train --resume", resume_args(), exp_resume),
           ("eval --model DIR", eval_args(model="{C}/ckpt"), exp_load),
           ("generate --model DIR", generate_args("{C}/ckpt"), exp_load),
           ("export --model DIR", export_args("{C}/ckpt"), exp_load),
           ("train --init-from STEP", train_args("--init-from", "{C}/" + STEP)[:1] +
            ["--steps", "1", "--data", TOK, "--log-every", "0", *SHAPE, "--init-from", "{C}/" + STEP], exp_load)]
    if file_model is not None:
        out.append(("eval --model STEP/model.safetensors", eval_args(model="{C}/" + STEP + "/model.safetensors"), file_model))
    return out


def edit_file(name, fn):
    def m(step, base):
        p = step / name
        p.write_bytes(fn(p.read_bytes()))
    return m


def edit_json(name, fn):
    def m(step, base):
        p = step / name
        h = json.loads(p.read_text())
        fn(h)
        p.write_text(json.dumps(h, indent=1))
    return m


def no_manifest(m):
    def f(step, base):
        m(step, base)
        (step / "checksums.json").unlink()
    return f


def gen_checkpoints(base, rng):
    cases = []
    B = base.dir
    # Which reader reads which file: --resume reads layout, trainer, tokenizer and the shards (not
    # model.safetensors); eval/generate/export/--init-from of a folder verify every file but the
    # shards. A flipped byte of a file a command reads must be refused by it.
    resume_reads = {"shard-00000-of-00002.safetensors", "shard-00001-of-00002.safetensors", "layout.json",
                    "trainer.json", "tokenizer.model"}
    load_reads = {"model.safetensors", "layout.json", "trainer.json", "tokenizer.model"}
    for i in range(30):
        r = random.Random(rng.random())
        name = CKPT_FILES[i % len(CKPT_FILES)]
        size = (B / STEP / name).stat().st_size
        cnt = r.choice([1, 1, 2, 8])
        spots = sorted(r.randrange(size) for _ in range(cnt))
        masks = [r.randrange(1, 256) for _ in spots]

        def flip(data, spots=spots, masks=masks):
            b = bytearray(data)
            for a, m in zip(spots, masks):
                b[a] ^= m
            return bytes(b)
        if name == "checksums.json":  # a changed manifest fails some check, or names nothing read
            er = el = ef = "either"
        else:
            er = "reject" if name in resume_reads else "either"
            el = "reject" if name in load_reads else "either"
            ef = "reject" if name == "model.safetensors" else "either"
        cases += ckpt_case(f"{name}: bytes {spots} flipped", edit_file(name, flip), readers(er, el, ef),
                           "checkpoints/flipped")
    # NaN / Inf written into data, with and without the manifest (then the finite check names it).
    for i, (name, value) in enumerate([("shard-00000-of-00002.safetensors", float("nan")),
                                       ("shard-00001-of-00002.safetensors", float("inf")),
                                       ("model.safetensors", float("nan")), ("model.safetensors", -float("inf"))]):
        s = rng.random()

        def poison(step, base, name=name, value=value, s=s):
            p = step / name
            p.write_bytes(safetensors_poison(p.read_bytes(), random.Random(s), value)[0])
        shard = name.startswith("shard")
        cases += ckpt_case(f"{name}: {value} written in", poison,
                           readers("reject" if shard else "either", "either" if shard else "reject",
                                   None if shard else "reject"), "checkpoints/nan")
        cases += ckpt_case(f"{name}: {value} written in, checksums.json removed", no_manifest(poison),
                           readers("reject" if shard else "either", "either" if shard else "reject"), "checkpoints/nan")
    # layout.json
    lay = json.loads((B / STEP / "layout.json").read_text())
    u0 = lay["units"][0]

    def lay_param(key, fn, unit=0, param=0):
        return edit_json("layout.json", lambda h: h["units"][unit]["params"][param].__setitem__(
            key, fn(h["units"][unit]["params"][param][key])))

    def swap_offsets(h):
        p = h["units"][0]["params"]
        p[0]["shard_offset"], p[1]["shard_offset"] = p[1]["shard_offset"], p[0]["shard_offset"]
    layout_edits = [
        ("shard_offsets of two params swapped", edit_json("layout.json", swap_offsets), "either"),
        ("a shard_offset shifted by +1", lay_param("shard_offset", lambda v: v + 1, 0, 1), "either"),
        ("a shard_offset shifted by -1", lay_param("shard_offset", lambda v: v - 1, 0, 1), "either"),
        ("a shard_offset 2^62", lay_param("shard_offset", lambda v: 2**62), "reject"),
        ("a shard_offset -4800", lay_param("shard_offset", lambda v: -4800), "reject"),
        ("a shard_offset 1.5", lay_param("shard_offset", lambda v: 1.5), "reject"),
        ("a shard_offset '0'", lay_param("shard_offset", lambda v: "0"), "reject"),
        ("a chunk 2^62", lay_param("chunk", lambda v: 2**62), "reject"),
        ("a chunk 0", lay_param("chunk", lambda v: 0), "reject"),
        ("a chunk -1", lay_param("chunk", lambda v: -1), "reject"),
        ("a numel 2^63-1", lay_param("numel", lambda v: 2**63 - 1), "reject"),
        ("a shape [2^40, 2^40]", lay_param("shape", lambda v: [2**40, 2**40]), "reject"),
        ("a shape []", lay_param("shape", lambda v: []), "reject"),
        ("a param renamed", lay_param("name", lambda v: v + "x"), "reject"),
        ("world 0", edit_json("layout.json", lambda h: h.__setitem__("world", 0)), "reject"),
        ("world -2", edit_json("layout.json", lambda h: h.__setitem__("world", -2)), "reject"),
        ("world 3 (two shard files)", edit_json("layout.json", lambda h: h.__setitem__("world", 3)), "reject"),
        ("world 2^31", edit_json("layout.json", lambda h: h.__setitem__("world", 2**31)), "reject"),
        ("a unit's shard 2^62", edit_json("layout.json", lambda h: h["units"][0].__setitem__("shard", 2**62)), "reject"),
        ("a unit removed", edit_json("layout.json", lambda h: h["units"].pop()), "reject"),
        ("units emptied", edit_json("layout.json", lambda h: h.__setitem__("units", [])), "reject"),
        ("format v2", edit_json("layout.json", lambda h: h.__setitem__("format", "pylon-fsdp-dim0-v2")), "reject"),
        ("model.pylon.dim 64", edit_json("layout.json", lambda h: h["model"].__setitem__("pylon.dim", "64")), "reject"),
        ("model.pylon.heads 0", edit_json("layout.json", lambda h: h["model"].__setitem__("pylon.heads", "0")), "reject"),
        ("nested 100000 deep", edit_file("layout.json", lambda d: deep(100000).encode()), "reject"),
        ("an unknown key nested 100000 deep", edit_file("layout.json", lambda d: d.rstrip()[:-1] + b', "x": ' + deep(100000).encode() + b"}"), "either"),
        ("empty", edit_file("layout.json", lambda d: b""), "reject"),
        ("removed", lambda step, base: (step / "layout.json").unlink(), "reject"),
    ]
    for label, m, exp in layout_edits:
        cases += ckpt_case(f"layout.json: {label}", m, readers("reject", "reject"), "checkpoints/layout")
        cases += ckpt_case(f"layout.json: {label}, checksums.json removed", no_manifest(m),
                           [("train --resume", resume_args(), exp)], "checkpoints/layout")
    # trainer.json
    def tj(key, value):
        return edit_json("trainer.json", lambda h: h.__setitem__(key, value))

    def tjo(key, value):
        return edit_json("trainer.json", lambda h: h["options"].__setitem__(key, value))
    trainer_edits = [
        ("step + 1", tj("step", 3), "either"), ("step 0", tj("step", 0), "either"), ("step -1", tj("step", -1), "reject"),
        ("step 2^63-1", tj("step", 2**63 - 1), "reject"), ("step 1e300", tj("step", 1e300), "reject"),
        ("step 'two'", tj("step", "two"), "reject"), ("step removed", edit_json("trainer.json", lambda h: h.pop("step")), "reject"),
        ("world 3 (layout.json's is used)", tj("world", 3), "either"), ("world 0", tj("world", 0), "either"),
        ("global_batch_rows -8", tj("global_batch_rows", -8), "either"),
        ("options.lr -1", tjo("lr", -1), "either"), ("options.seq 2^40", tjo("seq", 2**40), "either"),
        ("options a list", tj("options", [1]), "either"),
        ("nested 100000 deep", edit_file("trainer.json", lambda d: deep(100000).encode()), "reject"),
        ("empty", edit_file("trainer.json", lambda d: b""), "reject"),
        ("removed", lambda step, base: (step / "trainer.json").unlink(), "reject"),
    ]
    for label, m, exp in trainer_edits:
        cases += ckpt_case(f"trainer.json: {label}", m, readers("reject", "reject"), "checkpoints/trainer")
        cases += ckpt_case(f"trainer.json: {label}, checksums.json removed", no_manifest(m),
                           [("train --resume", resume_args(), exp)], "checkpoints/trainer")

    # checksums.json
    def cs(fn):
        return edit_json("checksums.json", fn)
    manifest_edits = [
        ("removed (an old checkpoint: loads with a warning)", lambda step, base: (step / "checksums.json").unlink(),
         ("accept", "accept", "accept")),
        ("model.safetensors digest changed", cs(lambda h: h["files"]["model.safetensors"].__setitem__("xxh3_64", "0" * 16)),
         ("either", "reject", "reject")),
        ("a shard's digest changed", cs(lambda h: h["files"]["shard-00000-of-00002.safetensors"].__setitem__("xxh3_64", "f" * 16)),
         ("reject", "either", "either")),
        ("layout.json bytes + 1", cs(lambda h: h["files"]["layout.json"].__setitem__("bytes", h["files"]["layout.json"]["bytes"] + 1)),
         ("reject", "reject", "either")),
        ("a digest of 15 hex digits", cs(lambda h: h["files"]["trainer.json"].__setitem__("xxh3_64", "0" * 15)), ("reject", "reject", "either")),
        ("a digest a number", cs(lambda h: h["files"]["trainer.json"].__setitem__("xxh3_64", 7)), ("reject", "reject", "either")),
        ("bytes -1", cs(lambda h: h["files"]["trainer.json"].__setitem__("bytes", -1)), ("reject", "reject", "either")),
        ("bytes 2^64", cs(lambda h: h["files"]["trainer.json"].__setitem__("bytes", 2**64)), ("reject", "reject", "either")),
        ("algorithm md5", cs(lambda h: h.__setitem__("algorithm", "md5")), ("reject", "reject", "reject")),
        ("format v9", cs(lambda h: h.__setitem__("format", "pylon-checksums-9")), ("reject", "reject", "reject")),
        ("files emptied (nothing listed, nothing verified)", cs(lambda h: h.__setitem__("files", {})), ("either", "either", "either")),
        ("an entry for a missing file", cs(lambda h: h["files"].__setitem__("ghost.bin", {"bytes": 1, "xxh3_64": "0" * 16})),
         ("either", "reject", "either")),
        ("an entry with '../' in its name", cs(lambda h: h["files"].__setitem__("../latest", {"bytes": 1, "xxh3_64": "0" * 16})),
         ("reject", "reject", "either")),
        ("an entry naming /etc/passwd", cs(lambda h: h["files"].__setitem__("/etc/passwd", {"bytes": 1, "xxh3_64": "0" * 16})),
         ("reject", "reject", "either")),
        ("nested 100000 deep", edit_file("checksums.json", lambda d: deep(100000).encode()), ("reject", "reject", "reject")),
        ("empty", edit_file("checksums.json", lambda d: b""), ("reject", "reject", "reject")),
        ("a folder", lambda step, base: ((step / "checksums.json").unlink(), (step / "checksums.json").mkdir()), ("reject", "reject", "reject")),
        ("the other step's manifest", lambda step, base: shutil.copy(step.parent / "step_000001/checksums.json", step / "checksums.json"),
         ("reject", "reject", "reject")),
    ]
    for label, m, (er, el, ef) in manifest_edits:
        cases += ckpt_case(f"checksums.json: {label}", m, readers(er, el, ef), "checkpoints/manifest")
    # Files swapped, removed, truncated, extended (all under the manifest).
    others = [
        ("the two shards swapped", lambda step, base: (os.rename(step / CKPT_FILES[0], step / "tmp"),
                                                       os.rename(step / CKPT_FILES[1], step / CKPT_FILES[0]),
                                                       os.rename(step / "tmp", step / CKPT_FILES[1])), ("reject", "either", "either")),
        ("model.safetensors from step 1", lambda step, base: shutil.copy(step.parent / "step_000001/model.safetensors", step),
         ("either", "reject", "reject")),
        ("a shard from step 1", lambda step, base: shutil.copy(step.parent / "step_000001" / CKPT_FILES[1], step),
         ("reject", "either", "either")),
        ("a shard removed", lambda step, base: (step / CKPT_FILES[1]).unlink(), ("reject", "either", "either")),
        ("a shard truncated by 4 bytes", edit_file(CKPT_FILES[0], lambda d: d[:-4]), ("reject", "either", "either")),
        ("a shard extended by 4 bytes", edit_file(CKPT_FILES[0], lambda d: d + b"\0\0\0\0"), ("reject", "either", "either")),
        ("model.safetensors removed", lambda step, base: (step / "model.safetensors").unlink(), ("either", "reject", "reject")),
        ("model.safetensors truncated to 0", edit_file("model.safetensors", lambda d: b""), ("either", "reject", "reject")),
        ("tokenizer.model removed", lambda step, base: (step / "tokenizer.model").unlink(), ("reject", "reject", "either")),
        ("tokenizer.model replaced by garbage", edit_file("tokenizer.model", lambda d: b"\x08\x01" * 100), ("reject", "reject", "either")),
        ("a tokenizer.json added beside the listed tokenizer.model (not listed)",
         lambda step, base: write(step / "tokenizer.json", b"{ not json"), ("either", "either", "either")),
        ("an extra shard file of world 3 added", lambda step, base: shutil.copy(step / CKPT_FILES[0], step / "shard-00002-of-00003.safetensors"),
         ("either", "either", "either")),
    ]
    for label, m, (er, el, ef) in others:
        cases += ckpt_case(label, m, readers(er, el, ef), "checkpoints/files")
    # latest
    latest = [("latest -> a missing step", b"step_000099", "reject"), ("latest empty", b"", "reject"),
              ("latest garbage bytes", b"\xff\xfe\x00garbage", "reject"), ("latest -> ../../..", b"../../..", "reject"),
              ("latest -> /etc", b"/etc", "reject"), ("latest -> step_000001 (older, complete)", b"step_000001", "accept"),
              ("latest with a trailing newline", b"step_000002\n", "either"), ("latest of 1 MB", b"s" * (1 << 20), "reject"),
              ("latest -> '.'", b".", "reject"), ("latest -> a step folder without a manifest", b"step_x", "accept")]
    for label, text, exp in latest:
        def m(step, base, text=text):
            (step.parent / "latest").write_bytes(text)
            if text == b"step_x":
                shutil.copytree(step.parent / "step_000001", step.parent / "step_x")
                (step.parent / "step_x/checksums.json").unlink()
        cases += ckpt_case(label, m, [(c, a, exp) for c, a, _ in readers(exp, exp)[:4]], "checkpoints/latest")
    for label, m in [("latest removed", lambda step, base: (step.parent / "latest").unlink()),
                     ("latest a folder", lambda step, base: ((step.parent / "latest").unlink(), (step.parent / "latest").mkdir())),
                     ("latest a FIFO", lambda step, base: ((step.parent / "latest").unlink(), os.mkfifo(step.parent / "latest"))),
                     ("latest a symlink loop", lambda step, base: ((step.parent / "latest").unlink(),
                                                                   os.symlink(step.parent / "latest", step.parent / "latest"))),
                     ("every step folder removed", lambda step, base: (shutil.rmtree(step), shutil.rmtree(step.parent / "step_000001")))]:
        cases += ckpt_case(label, m, [(c, a, "reject") for c, a, _ in readers("reject", "reject")[:4]], "checkpoints/latest")
    # Resume into another world size with a corrupted shard: the launcher checks before the ranks.
    cases += ckpt_case("a shard's byte flipped, resumed on 3 ranks", edit_file(CKPT_FILES[1], lambda d: d[:-9] + bytes([d[-9] ^ 1]) + d[-8:]),
                       [("train --resume --nproc-per-node 3", resume_args("{C}/ckpt", "--nproc-per-node", "3", "--batch", "2"),
                         "reject")], "checkpoints/flipped")
    return cases


# ----------------------------------------------------------------------------------------------
# (5) fault injection: dist/fault_injection.h (a rank aborts or hangs at a step), signals from
# outside at seeded moments, hand-launched ranks that disagree or never come.


def resume_check(binary, env):
    """After a killed --save-every run: `latest`, when there is one, must name a complete step
    that resumes (exit 0) one step further."""
    def check(cdir, timeout):
        latest = cdir / "ckpt/latest"
        if not latest.exists():
            return None
        step = json.loads((cdir / "ckpt" / latest.read_text().strip() / "trainer.json").read_text())["step"]
        args = replace_flags(train_args(steps=str(step + 1)), ["--resume", str(cdir / "ckpt"), "--save", str(cdir / "ckpt2")])
        args = [subst(a, cdir, cdir.parent.parent / "base") for a in args]
        r = subprocess.run([binary, *args], env=env, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            last = r.stderr.decode(errors="replace").strip().splitlines()[-1:]
            return f"resume from latest after the fault failed (exit {r.returncode}): {last}"
        return None
    return check


def gen_faults(base, rng, binary, env):
    cases = []
    t = lambda *extra: train_args("--dist-timeout", "5", *extra, steps="6")
    for world in (2, 3):
        for rank in range(world):
            for step in (1, 2, 6):
                cases.append(Case("faults", "faults/crash-rank",
                                  f"PYLON_TEST_CRASH_RANK={rank} STEP={step}, {world} ranks, --save-every 1",
                                  t("--nproc-per-node", str(world), "--batch", "2", "--save-every", "1", "--save", "{C}/ckpt"),
                                  "reject", env={"PYLON_TEST_CRASH_RANK": str(rank), "PYLON_TEST_CRASH_STEP": str(step)},
                                  after=resume_check(binary, env)))
                cases.append(Case("faults", "faults/hang-rank",
                                  f"PYLON_TEST_HANG_RANK={rank} STEP={step}, {world} ranks, --dist-timeout 1",
                                  replace_flags(t("--nproc-per-node", str(world), "--batch", "2"), ["--dist-timeout", "1"]),
                                  "reject", env={"PYLON_TEST_HANG_RANK": str(rank), "PYLON_TEST_HANG_STEP": str(step)}))
    cases.append(Case("faults", "faults/crash-rank", "PYLON_TEST_CRASH_RANK=0, one rank (aborts by design)",
                      t(), "signal", env={"PYLON_TEST_CRASH_RANK": "0"}, sig=signal.SIGABRT))
    cases.append(Case("faults", "faults/hang-rank", "crash and hang at once, 3 ranks",
                      replace_flags(t("--nproc-per-node", "3", "--batch", "2"), ["--dist-timeout", "1"]), "reject",
                      env={"PYLON_TEST_CRASH_RANK": "2", "PYLON_TEST_HANG_RANK": "1", "PYLON_TEST_HANG_STEP": "2"}))
    # Signals from outside at seeded moments.
    long_run = lambda world: train_args("--nproc-per-node", str(world), "--batch", "2", "--save-every", "1",
                                        "--save", "{C}/ckpt", "--dist-timeout", "5", steps="400")
    for i in range(16):
        r = random.Random(rng.random())
        world = r.choice([2, 3])
        delay = round(r.uniform(0.3, 3.0), 2)
        target = r.choice(["rank", "rank", "launcher"])
        sig = r.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSEGV]
                       if target == "rank" else [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
        which = r.randrange(world)

        def during(proc, cdir, t0, delay=delay, target=target, sig=sig, which=which):
            if time.monotonic() - t0 < delay:
                return False
            if target == "launcher":
                os.kill(proc.pid, sig)
                return True
            kids = children(proc.pid)
            if len(kids) <= which:
                return False
            os.kill(sorted(kids)[which], sig)
            return True
        name = f"{signal.Signals(sig).name} to {'the launcher' if target == 'launcher' else f'rank {which}'} of {world} at {delay} s, --save-every 1"
        cases.append(Case("faults", f"faults/signal-{target}", name, long_run(world),
                          "signal" if target == "launcher" else "reject", during=during,
                          sig=sig if target == "launcher" else None, after=resume_check(binary, env)))
    # Hand-launched ranks (torchrun-style variables) that disagree, or a peer that dies.
    def peer_case(name, main_env, main_args, peer_env, peer_args, exp="reject"):
        cases.append(Case("faults", "faults/hand-launched", name, main_args, exp, env=main_env,
                          peers=[(peer_env, peer_args)] if peer_env is not False else []))
    w2 = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "PORT"}
    base_t = train_args("--dist-timeout", "3", "--batch", "2", steps="4")
    # docs/cli.md: every rank must be given the same flags (paths aside); a rank with others is
    # refused by every rank before the first collective.
    peer_case("rank 1 with another --dim", {"RANK": "0", **w2}, base_t, {"RANK": "1", **w2},
              replace_flags(base_t, ["--dim", "64"]))
    peer_case("rank 1 with another --seq", {"RANK": "0", **w2}, base_t, {"RANK": "1", **w2},
              replace_flags(base_t, ["--seq", "8"]))
    peer_case("rank 1 with more --steps", {"RANK": "0", **w2}, base_t, {"RANK": "1", **w2},
              replace_flags(base_t, ["--steps", "7"]))
    peer_case("rank 0 with more --steps", {"RANK": "0", **w2}, replace_flags(base_t, ["--steps", "7"]),
              {"RANK": "1", **w2}, base_t)
    peer_case("rank 1 with another --data (paths are not compared)", {"RANK": "0", **w2}, base_t, {"RANK": "1", **w2},
              replace_flags(base_t, ["--data", TOK32]), "either")
    for flag, value in (("--layers", "3"), ("--vocab", "301"), ("--heads", "8"), ("--preset", "seed"),
                        ("--grad-accum", "2"), ("--save-every", "1"), ("--no-reshard", None), ("--no-prefetch", None),
                        ("--no-sync", None), ("--eval-every", "1"), ("--batch", "3"), ("--profile", "{C}/prof1"),
                        ("--lr", "0.5")):
        extra = [flag] + ([value] if value is not None else [])
        if flag in ("--save-every", "--eval-every"):
            extra += ["--save", "{C}/ckpt1"] if flag == "--save-every" else ["--val-data", VAL, "--eval-steps", "1"]
        peer_case(f"rank 1 with {' '.join(extra)}", {"RANK": "0", **w2}, base_t, {"RANK": "1", **w2},
                  replace_flags(base_t, extra))
    peer_case("two ranks both claiming rank 0", {"RANK": "0", **w2}, base_t, {"RANK": "0", **w2}, base_t)
    peer_case("rank 1 with WORLD_SIZE=3", {"RANK": "0", **w2}, base_t, {"RANK": "1", **dict(w2, WORLD_SIZE="3")}, base_t)
    peer_case("rank 1 aborting at step 2", {"RANK": "0", **w2}, base_t,
              {"RANK": "1", **w2, "PYLON_TEST_CRASH_RANK": "1", "PYLON_TEST_CRASH_STEP": "2"}, base_t)
    peer_case("rank 1 a different program listening on the port (nc-like)", {"RANK": "1", **w2}, base_t, None, None)
    peer_case("--dist-timeout 1e-300 (0 ms) on 2 ranks", {}, replace_flags(base_t, ["--nproc-per-node", "2",
                                                                                      "--dist-timeout", "1e-300"]), False, None, "either")
    return cases


# ----------------------------------------------------------------------------------------------
# Running and classifying


class Result:
    def __init__(self, case, cls, rc, seconds, err, note=""):
        self.case, self.cls, self.rc, self.seconds, self.err, self.note = case, cls, rc, seconds, err, note
        self.repro = ""


def case_env(case, work, cdir, base_dir, port):
    env = base_env(work)
    for k in case.unset:
        env.pop(k, None)
    for k, v in case.env.items():
        env[k] = subst(v, cdir, base_dir).replace("PORT", str(port)) if k != "MASTER_ADDR" else subst(v, cdir, base_dir)
    return {k: v for k, v in env.items()}


def reproducer(binary, case, cdir, env, args, peers):
    """A shell line that reruns the case from its folder (arguments over 200 characters are shown
    shortened; the folder's case.json has them whole)."""
    def line(env, args):
        shown = [f"{k}={v}" for k, v in sorted(env.items())]
        return "env -i " + " ".join(shlex.quote(x) for x in shown) + " " + shlex.quote(binary) + " " + \
            " ".join(shlex.quote(a if len(a) < 200 else a[:60] + f"...({len(a)} chars)") for a in args)
    text = f"cd {shlex.quote(str(cdir))} && " + line(env, args)
    for penv, pargs in peers:
        text = f"( {line(penv, pargs)} & ) ; " + text
    if case.during:
        text += f"   # while running: {case.name}"
    return text


def classify(case, rc, timed_out, err_text, stray, progressed, computing=False):
    lines = [l for l in err_text.splitlines() if l.strip()]
    if any(m in err_text for m in SANITIZER_MARKS):
        return "crash", "sanitizer report"
    if timed_out:
        if case.expect in ("accept", "either") and progressed:
            return "accepted-ok", "still working at the time limit, printing progress"
        if case.expect == "accept" and computing:
            return "slow", "still computing at the time limit, without a progress line"
        return "hang", "no exit within the time limit"
    if stray:
        return "hang", f"{stray} process(es) of the case still running after it exited"
    if case.expect == "signal" and case.sig is not None and rc in (-case.sig, 128 + case.sig, 1, 0):
        if rc == 0:
            return "silent", f"exit 0 after {signal.Signals(case.sig).name}"
        return ("clean" if len(lines) <= 1 else "multi-line"), f"ended by {signal.Signals(case.sig).name} as sent"
    if rc < 0:
        return "crash", f"killed by {signal.Signals(-rc).name}"
    if rc not in (0, 1, 2, 4):
        return "crash", f"exit code {rc}"
    if rc == 0:
        if case.expect in ("reject", "signal"):
            return "silent", "exit 0"
        return "accepted-ok", ""
    if not lines:
        return "no-message", ""
    if len(lines) > 1:
        return "multi-line", f"{len(lines)} lines"
    return "clean", ""


def run_case(case, binary, work, timeout, keep):
    base_dir = work / "base"
    cdir = work / "cases" / f"{case.index:05d}"
    if cdir.exists():
        shutil.rmtree(cdir)
    cdir.mkdir(parents=True)
    if case.prepare:
        try:
            case.prepare(cdir, base_dir)
        except Exception as e:  # a bug of this script, not of pylon: reported apart
            import traceback
            return Result(case, "script-error", None, 0, traceback.format_exc(), f"preparing the case failed: {e!r}")
    port = free_port()
    env = case_env(case, work, cdir, base_dir, port)
    args = [subst(a, cdir, base_dir) for a in case.args]
    limit = min(timeout, case.timeout) if case.timeout else timeout
    peers = []
    peer_specs = []
    for penv, pargs in case.peers:
        if penv is None:  # something else holds the rendezvous port: a socket that never answers
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(8)
            peers.append(("socket", s))
            continue
        e = dict(base_env(work))
        e.update({k: subst(v, cdir, base_dir).replace("PORT", str(port)) for k, v in penv.items()})
        pa = [subst(a, cdir, base_dir) for a in pargs]
        peer_specs.append((e, pa))
        with open(cdir / f"peer{len(peers)}.out", "wb") as po, open(cdir / f"peer{len(peers)}.err", "wb") as pe:
            peers.append(("proc", subprocess.Popen([binary, *pa], cwd=cdir, env=e, stdin=subprocess.DEVNULL,
                                                   stdout=po, stderr=pe, start_new_session=True)))
    (cdir / "case.json").write_text(json.dumps({"name": case.name, "expect": case.expect, "argv": [binary, *args],
                                                "env": env, "peers": [[e, [binary, *a]] for e, a in peer_specs]},
                                               indent=1))
    out_f, err_f = open(cdir / "stdout", "wb"), open(cdir / "stderr", "wb")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen([binary, *args], cwd=cdir, env=env, stdin=subprocess.DEVNULL, stdout=out_f,
                                stderr=err_f, start_new_session=True)
    except OSError as e:  # the case itself is impossible here (an argument over the kernel's limit)
        raise SystemExit(f"hostile.py: case {case.index} ({case.name}) cannot start: {e}")
    timed_out, computing, done_during, mark, cpu_mark = False, False, case.during is None, None, 0.0
    while proc.poll() is None:
        now = time.monotonic() - t0
        if not done_during:
            try:
                done_during = case.during(proc, cdir, t0)
            except ProcessLookupError:
                done_during = True
        if mark is None and now > 0.6 * limit:
            mark, mark_time, cpu_mark = out_f.tell() + err_f.tell(), now, session_cpu_seconds(proc.pid)
        if now > limit:
            timed_out = True
            computing = mark is not None and (session_cpu_seconds(proc.pid) - cpu_mark) >= 0.5 * (now - mark_time)
            kill_session(proc.pid)
            proc.wait()
            break
        time.sleep(0.02)
    seconds = time.monotonic() - t0
    out_f.close(), err_f.close()
    progressed = timed_out and mark is not None and (cdir / "stdout").stat().st_size + (cdir / "stderr").stat().st_size > mark
    # The case's other processes (ranks, peers) must end on their own shortly after.
    stray = 0
    sessions = [proc.pid] + [p.pid for kind, p in peers if kind == "proc"]
    deadline = time.monotonic() + 8
    for kind, p in peers:
        if kind == "proc":
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic() + (limit if not timed_out else 0)))
            except subprocess.TimeoutExpired:
                pass
        else:
            p.close()
    while time.monotonic() < deadline:
        left = [pid for s in sessions for pid in session_members(s)]
        if not left:
            break
        time.sleep(0.1)
    else:
        left = [pid for s in sessions for pid in session_members(s)]
        stray = len(left)
    for s in sessions:
        kill_session(s)
    for kind, p in peers:
        if kind == "proc" and p.poll() is None:
            p.wait()
    rc = proc.returncode
    err_text = (cdir / "stderr").read_bytes().decode(errors="replace")
    cls, note = classify(case, rc, timed_out, err_text, stray, progressed, computing)
    if case.after and cls not in FAILURES:
        try:
            problem = case.after(cdir, 120)
        except subprocess.TimeoutExpired:
            problem = "the follow-up resume did not end within 120 s"
        if problem:
            cls, note = "broken", problem
    repro = reproducer(binary, case, cdir, env, args, peer_specs)
    result = Result(case, cls, rc, seconds, err_text, note)
    result.repro = repro
    if cls not in FAILURES and not keep:
        shutil.rmtree(cdir, ignore_errors=True)
    return result


# ----------------------------------------------------------------------------------------------
# Choosing the cases for a budget


def choose(pools, budget, rng):
    """Per mutation class, its share of the budget; within a class, round-robin over its groups
    (each shuffled), so that a small budget still touches every parser and every kind of fault."""
    chosen = []
    total_w = sum(WEIGHTS[m] for m in pools if pools[m])
    quotas = {m: int(round(budget * WEIGHTS[m] / total_w)) for m in pools if pools[m]}
    spare = budget - sum(min(q, len(pools[m])) for m, q in quotas.items())
    for m in MCLASSES:  # what one class cannot use goes to the others, in order
        if m in quotas and spare > 0 and len(pools[m]) > quotas[m]:
            extra = min(spare, len(pools[m]) - quotas[m])
            quotas[m] += extra
            spare -= extra
    for m in MCLASSES:
        if m not in quotas:
            continue
        groups = {}
        for c in pools[m]:
            groups.setdefault(c.group, []).append(c)
        order = sorted(groups)
        for g in order:
            rng.shuffle(groups[g])
        rng.shuffle(order)
        picked, i = [], 0
        while len(picked) < min(quotas[m], len(pools[m])):
            g = order[i % len(order)]
            if groups[g]:
                picked.append(groups[g].pop())
            i += 1
        chosen += picked
    rng.shuffle(chosen)
    return chosen


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pylon", help="the pylon executable")
    ap.add_argument("--work", default="/tmp/pylon-hostile", help="scratch folder (made; base/ and cases/ inside)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=1000, help="case budget (default 1000: about 2 min on 2 cores)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds per case before it counts as a hang")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="cases at once")
    ap.add_argument("--classes", default=",".join(MCLASSES), help="mutation classes to run (comma-separated)")
    ap.add_argument("--keep", action="store_true", help="keep every case's folder, not only the failing ones")
    ap.add_argument("--list", action="store_true", help="print the chosen cases and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    a = ap.parse_args()
    wanted = [c.strip() for c in a.classes.split(",") if c.strip()]
    for c in wanted:
        if c not in MCLASSES:
            ap.error(f"--classes: unknown class {c!r} (one of {', '.join(MCLASSES)})")
    binary = str(Path(a.pylon).resolve())
    if not os.access(binary, os.X_OK):
        print(f"hostile.py: {a.pylon} is not an executable", file=sys.stderr)
        return 2
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if (work / "cases").exists():
        shutil.rmtree(work / "cases")
    t_start = time.monotonic()
    base = Base(binary, work, a.seed).make()
    if base.ncu:
        shutil.copy(base.dir / base.ncu[0], base.dir / "ncu.csv")
    # A state dict without Pylon metadata, for --heads of eval.
    data = read(base.dir / "weights.safetensors")
    _, h = safetensors_parts(data)
    h.pop("__metadata__")
    write(base.dir / "weights-nometa.safetensors", safetensors_with_header(data, h))
    env = base_env(work)
    flags = probe_flags(binary, env)
    setup_s = time.monotonic() - t_start

    rng = random.Random(a.seed)
    gens = {"files": lambda r: gen_files(base, r), "flags": lambda r: gen_flags(base, r, flags),
            "env": lambda r: gen_env(base, r), "checkpoints": lambda r: gen_checkpoints(base, r),
            "faults": lambda r: gen_faults(base, r, binary, env)}
    pools = {m: (gens[m](random.Random(f"{a.seed}:{m}")) if m in wanted else []) for m in MCLASSES}
    catalogue = sum(len(p) for p in pools.values())
    chosen = choose(pools, a.cases, rng)
    for i, c in enumerate(chosen):
        c.index = i
    if a.list:
        for c in chosen:
            print(f"{c.index:5d} {c.mclass:11s} {c.expect:7s} {c.name}")
        return 0

    results = []
    counts = {k: 0 for k in CLASSES + ("script-error",)}
    t_run = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(run_case, c, binary, work, a.timeout, a.keep) for c in chosen]
        for f in concurrent.futures.as_completed(futures):
            r = f.result()
            results.append(r)
            counts[r.cls] += 1
            if not a.quiet:
                bad = sum(counts[k] for k in FAILURES)
                print(f"\r{len(results)}/{len(chosen)} cases, {bad} failing", end="", file=sys.stderr, flush=True)
    if not a.quiet:
        print(file=sys.stderr)
    results.sort(key=lambda r: r.case.index)
    run_s = time.monotonic() - t_run

    # Report.
    print(f"pylon hostile-input run: {binary}")
    print(f"seed {a.seed}, {len(chosen)} cases of {catalogue} (budget {a.cases}), timeout {a.timeout:g} s, "
          f"{a.jobs} at once; inputs made in {setup_s:.0f} s, cases ran in {run_s:.0f} s")
    print()
    width = max(len(c) for c in CLASSES)
    print(f"{'':12s}" + "".join(f"{c:>{width + 1}s}" for c in CLASSES) + f"{'total':>7s}")
    for m in MCLASSES + ("total",):
        rs = [r for r in results if m == "total" or r.case.mclass == m]
        if not rs and m != "total":
            continue
        print(f"{m:12s}" + "".join(f"{sum(r.cls == c for r in rs):>{width + 1}d}" for c in CLASSES) + f"{len(rs):>7d}")
    print()
    groups = sorted({r.case.group for r in results})
    print("per group: clean / accepted-ok / warnings / failing")
    for g in groups:
        rs = [r for r in results if r.case.group == g]
        print(f"  {g:28s} {sum(r.cls == 'clean' for r in rs):5d} {sum(r.cls == 'accepted-ok' for r in rs):5d} "
              f"{sum(r.cls in ('multi-line', 'no-message', 'slow') for r in rs):5d} {sum(r.cls in FAILURES for r in rs):5d}")
    failing = [r for r in results if r.cls in FAILURES]
    print()
    if failing:
        print(f"FAILING CASES ({len(failing)}):")
        for r in failing:
            last = [l for l in r.err.splitlines() if l.strip()][-3:]
            print(f"- [{r.cls}] #{r.case.index} {r.case.mclass}: {r.case.name}")
            print(f"    exit {r.rc}, {r.seconds:.1f} s{': ' + r.note if r.note else ''}")
            for l in last:
                print(f"    stderr: {l[:300]}")
            print(f"    reproduce: {r.repro}")
    else:
        print("no crash, hang, silent acceptance or broken follow-up")
    warn = [r for r in results if r.cls in ("multi-line", "no-message", "slow")]
    if warn:
        print()
        print(f"warnings ({len(warn)}): more than one line, or none, on stderr; or slow")
        for r in warn[:40]:
            first = next((l for l in r.err.splitlines() if l.strip()), "")
            print(f"  #{r.case.index} {r.case.name[:90]}: {r.note}; first: {first[:150]}")
        if len(warn) > 40:
            print(f"  ... and {len(warn) - 40} more (report.json)")
    broken_cases = [r for r in results if r.cls == "script-error"]
    if broken_cases:
        print(f"\nSCRIPT ERRORS ({len(broken_cases)}): cases this script could not prepare (a bug here, not in pylon)")
        for r in broken_cases:
            print(f"  #{r.case.index} {r.case.name}: {r.note}")
    report = {"binary": binary, "seed": a.seed, "cases": len(chosen), "timeout": a.timeout, "jobs": a.jobs,
              "counts": counts, "results": [
                  {"index": r.case.index, "class": r.cls, "mclass": r.case.mclass, "group": r.case.group,
                   "name": r.case.name, "expect": r.case.expect, "exit": r.rc, "seconds": round(r.seconds, 3),
                   "note": r.note, "stderr": r.err[-2000:], "reproduce": r.repro} for r in results]}
    (work / "report.json").write_text(json.dumps(report, indent=1))
    print(f"\nreport: {work / 'report.json'}")
    return 2 if broken_cases else 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
