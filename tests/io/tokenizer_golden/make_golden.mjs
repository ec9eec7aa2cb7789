// Makes the byte-level BPE test data of tests/io/hf_tokenizer_test.cpp: trains five tiny tokenizers
// (a few hundred merges on the corpus below), writes each as a Hugging Face tokenizer.json in the
// style of a model family, and writes the ids an independent implementation gives for a set of
// tricky strings: Hugging Face's tokenizers library itself (Rust), through its Node binding, the npm
// package `tokenizers`, installed into a scratch folder. When Tokenizers.js (@huggingface/tokenizers,
// the JavaScript port that Transformers.js runs) is installed there too, the script also encodes
// every text with it and lists where the two differ (the data is the Rust library's).
//
//   mkdir -p /tmp/tokjs && (cd /tmp/tokjs && npm install tokenizers@0.23.2 @huggingface/tokenizers@0.2.0)
//   node tests/io/tokenizer_golden/make_golden.mjs /tmp/tokjs
//
// Output, beside this script: <style>/tokenizer.json (+ tokenizer_config.json) for the styles
// gpt2 (ByteLevel with its built-in split pattern, merges as "a b" strings, <|endoftext|> in the
// vocab), llama3 (Split with Llama 3's pattern then ByteLevel, ignore_merges with words that no
// merge makes, merges as pairs, special tokens past the vocab), qwen2 (NFC normalizer, Qwen2's
// pattern: one digit a piece), mixed (Digits, then ByteLevel adding a prefix space; special tokens
// that strip the whitespace beside them; a normalized non-special added token) and splits (NFC in a
// Sequence; Split with a String pattern and Removed, Split with invert, Digits one by one, ByteLevel
// with a prefix space and without its pattern; a normalized added token that NFC changes);
// expected.json: per style, each text with the ids of encode(text) without special tokens added
// and decode(ids) keeping them.
import { createRequire } from "node:module";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const modules = resolve(process.argv[2] ?? ".");
const require = createRequire(join(modules, "package.json"));
const version = (name) => JSON.parse(readFileSync(join(modules, "node_modules", name, "package.json"), "utf8")).version;
const { Tokenizer } = require("tokenizers");
const made_by = "tokenizers " + version("tokenizers") + " (npm: Hugging Face's Rust tokenizers, Node binding)";
let js = null;  // Tokenizers.js, for the cross-check
try {
  js = { Tokenizer: require("@huggingface/tokenizers").Tokenizer, version: version("@huggingface/tokenizers") };
} catch {}
const here = dirname(fileURLToPath(import.meta.url));

// GPT-2's reversible byte -> printable character map (bytes_to_unicode in its encoder.py).
function bytes_to_unicode() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; ++b) bs.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) bs.push(b);
  for (let b = 0xae; b <= 0xff; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const map = new Array(256);
  bs.forEach((b, i) => (map[b] = String.fromCodePoint(cs[i])));
  return map;
}
const BYTE_CHAR = bytes_to_unicode();
const to_byte_chars = (s) => Array.from(new TextEncoder().encode(s), (b) => BYTE_CHAR[b]).join("");

const GPT2_PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The training split only shapes which merges exist; the splits under test are the files'.
const LLAMA3_TRAIN_SPLIT = /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

const CORPUS = `The quick brown fox jumps over the lazy dog. The dog doesn't mind; it's used to the fox.
Once upon a time, there was a little town where everyone knew everyone else's name.
We'll see what they've done with the old library: I'm sure they'd have kept the books.
In 1969, 600 million people watched the landing; 384400 km away, 2 men walked on the Moon.
Prices rose 3.5% in 2023, from $1,299.99 to $1,345.50 -- or so the report said.
def tokenize(text):
    return [word for word in text.split() if word]  # keep non-empty words
Le café de la gare est fermé ; nous irons à l'hôtel près de la rivière, dit-il.
Über den Wolken muss die Freiheit wohl grenzenlos sein, sagte der Pilot in Zürich.
Ærøskøbing, São Paulo, Kraków, Reykjavík and İstanbul are cities with accents.
東京は日本の首都です。今日はいい天気ですね。中文分词测试，我们喜欢学习。
Привет, мир! Как дела? Γειά σου κόσμε. مرحبا بالعالم.
Emoji are bytes too: 🙂 😀 👍 🎉 🚀 ❤️ and people 👩‍💻.
    Indented lines, tabs\tinside, and  double  spaces   stay as they are.

A blank line came before this one, and the end of the text comes soon.
THE END. the end. The End? "Quoted", 'single', (parens) [brackets] {braces} <angles>.
`;

function pretokenize(text, pattern) {
  return text.match(pattern) ?? [];
}

// Byte-level BPE training: the most frequent adjacent pair (ties: the smaller pair) merges next,
// down to pairs seen once, so that the merges reach whole words.
function train(text, split, n_merges) {
  const counts = new Map();
  for (const piece of pretokenize(text, split)) {
    const w = to_byte_chars(piece);
    counts.set(w, (counts.get(w) ?? 0) + 1);
  }
  const words = [...counts].map(([w, n]) => ({ symbols: Array.from(w), n }));
  const merges = [];
  while (merges.length < n_merges) {
    const pairs = new Map();
    for (const { symbols, n } of words)
      for (let i = 0; i + 1 < symbols.length; ++i) {
        const key = symbols[i] + "\u0000" + symbols[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    let best = null, best_n = 0;
    for (const [key, n] of pairs)
      if (n > best_n || (n === best_n && best !== null && key < best)) (best = key), (best_n = n);
    if (best === null) break;
    const [a, b] = best.split("\u0000");
    merges.push([a, b]);
    for (const w of words) {
      const out = [];
      for (let i = 0; i < w.symbols.length; ++i) {
        if (i + 1 < w.symbols.length && w.symbols[i] === a && w.symbols[i + 1] === b) out.push(a + b), ++i;
        else out.push(w.symbols[i]);
      }
      w.symbols = out;
    }
  }
  const vocab = {};
  BYTE_CHAR.forEach((c, b) => (vocab[c] = b));
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  return { vocab, merges };
}

function added(id, content, special, extra = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special, ...extra };
}

function bpe_model(vocab, merges, { pair_merges, ignore_merges }) {
  return {
    type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
    fuse_unk: false, byte_fallback: false, ignore_merges,
    vocab, merges: pair_merges ? merges : merges.map(([a, b]) => `${a} ${b}`),
  };
}

const byte_level = (add_prefix_space, use_regex) =>
  ({ type: "ByteLevel", add_prefix_space, trim_offsets: true, use_regex });

function make_styles() {
  const styles = {};
  {  // GPT-2: the built-in pattern; <|endoftext|> is the vocab's last token and a special token
    const { vocab, merges } = train(CORPUS, GPT2_PATTERN, 300);
    const eot = Object.keys(vocab).length;
    vocab["<|endoftext|>"] = eot;
    styles.gpt2 = {
      json: {
        version: "1.0", truncation: null, padding: null,
        added_tokens: [added(eot, "<|endoftext|>", true, { normalized: true })],
        normalizer: null, pre_tokenizer: byte_level(false, true),
        post_processor: byte_level(true, false), decoder: byte_level(true, true),
        model: bpe_model(vocab, merges, { pair_merges: false, ignore_merges: false }),
      },
      config: { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", tokenizer_class: "GPT2Tokenizer" },
    };
  }
  {  // Llama 3: Split with its pattern, ByteLevel without its own; specials past the vocab; whole
     // words in the vocab that no merge makes, which ignore_merges takes as they are
    const { vocab, merges } = train(CORPUS, LLAMA3_TRAIN_SPLIT, 320);
    for (const word of ["Hello", " today", "!!!", " DON"]) vocab[to_byte_chars(word)] = Object.keys(vocab).length;
    const v = Object.keys(vocab).length;
    const specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"];
    styles.llama3 = {
      json: {
        version: "1.0", truncation: null, padding: null,
        added_tokens: specials.map((s, i) => added(v + i, s, true)),
        normalizer: null,
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
          byte_level(false, false)] },
        post_processor: { type: "Sequence", processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          { type: "TemplateProcessing",
            single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
            pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                   { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
            special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [v], tokens: ["<|begin_of_text|>"] } } }] },
        decoder: byte_level(true, true),
        model: bpe_model(vocab, merges, { pair_merges: true, ignore_merges: true }),
      },
      config: { bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>", tokenizer_class: "PreTrainedTokenizerFast" },
    };
  }
  {  // Qwen2: NFC, then its pattern (single digits); the eos in tokenizer_config.json as an object
    const { vocab, merges } = train(CORPUS.normalize("NFC"), LLAMA3_TRAIN_SPLIT, 260);
    const v = Object.keys(vocab).length;
    const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
    styles.qwen2 = {
      json: {
        version: "1.0", truncation: null, padding: null,
        added_tokens: specials.map((s, i) => added(v + i, s, true)),
        normalizer: { type: "NFC" },
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false },
          byte_level(false, false)] },
        post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
        decoder: byte_level(false, false),
        model: bpe_model(vocab, merges, { pair_merges: false, ignore_merges: false }),
      },
      config: { bos_token: null, eos_token: { __type: "AddedToken", content: "<|im_end|>", lstrip: false,
                normalized: false, rstrip: false, single_word: false }, tokenizer_class: "Qwen2Tokenizer" },
    };
  }
  {  // Digits, then ByteLevel with a prefix space on every piece; tokens that strip whitespace
    const { vocab, merges } = train(CORPUS, GPT2_PATTERN, 200);
    const v = Object.keys(vocab).length;
    styles.mixed = {
      json: {
        version: "1.0", truncation: null, padding: null,
        added_tokens: [
          added(v, "<mask>", true, { lstrip: true }),
          added(v + 1, "<sep>", true, { rstrip: true }),
          added(v + 2, "hello world", false),
        ],
        normalizer: null,
        pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: false }, byte_level(true, true)] },
        post_processor: null, decoder: byte_level(true, true),
        model: bpe_model(vocab, merges, { pair_merges: true, ignore_merges: false }),
      },
      config: { eos_token: "<sep>" },
    };
  }
  {  // The other split options: a String pattern whose matches go, an inverted Removed pattern (what
     // it does not match goes), digits one by one, ByteLevel without its pattern; NFC in a Sequence
     // and an added token written decomposed (NFC composes it before matching)
    const { vocab, merges } = train(CORPUS.normalize("NFC"), GPT2_PATTERN, 240);
    const v = Object.keys(vocab).length;
    styles.splits = {
      json: {
        version: "1.0", truncation: null, padding: null,
        added_tokens: [added(v, "<|end|>", true), added(v + 1, "cafe\u0301 noir", false)],
        normalizer: { type: "Sequence", normalizers: [{ type: "NFC" }] },
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { String: "--" }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { Regex: "[^\\x{2000}-\\x{200B}]+" }, behavior: "Removed", invert: true },
          { type: "Split", pattern: { Regex: "(?i:'s|'t)|\\s+(?!\\S)|\\s+|[^\\s']+|'" }, behavior: "Isolated",
            invert: false },
          { type: "Digits", individual_digits: true },
          byte_level(true, false)] },
        post_processor: null, decoder: byte_level(true, true),
        model: bpe_model(vocab, merges, { pair_merges: false, ignore_merges: false }),
      },
      config: { eos_token: "<|end|>" },
    };
  }
  return styles;
}

const TEXTS = [
  "", "Hello world", "Hello, world! How are you doing today?", "the end", " the end", "The End.",
  "don't can't I'm we'll they've she'd it's", "DON'T I'M YOU'RE WE'LL", "'s 's 'S x's",
  "naïve café résumé Zürich Ærøskøbing", "e\u0301 versus \u00e9, A\u030a versus \u00c5",
  "東京は日本の首都です。中文测试", "emoji 🙂👍🏽 family 👨‍👩‍👧 flag 🇫🇷 ❤️",
  "1 12 123 1234 12345 1234567890123 3.14159 -42 1,000,000 2023-12-31",
  "   leading and trailing spaces   ", "a  b   c    d     e", "tabs\tand\t\tmore\ttabs",
  "line one\nline two\n\nline four\r\nwindows\r\n", "\n", "\n\n\n", "   \n  \n   x", " ".repeat(40),
  "a\u00a0b\u3000c\u2009d", "\u0000\u0001\u007f control", "!!! ??? ... --- *** ~~~",
  "def f(x):\n    return x**2  # square\n", "Привет мир Γειά σου κόσμε مرحبا",
  "x".repeat(300), "ab".repeat(120) + " " + "é".repeat(50),
  "<|begin_of_text|>Hello<|eot_id|> world<|end_of_text|>", "<|begin_of_text|><|begin_of_text|>",
  "<|begin_of_text|", "<|end_of_text|>>", "text<|endoftext|>more text<|endoftext|>",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|reserved_special_token_0|>",
  "word <mask> next", "a   <mask>", "<mask>   b", "<sep>   b", "c <sep>\n\nd", "say hello world!",
  "Hello world hello world", "hello worlds", "3<mask>4<sep>5",
  "IT'S I'LL WE'VE it'\u017f it'\u212a", "a\u0085b\ufeffc\u180ed\u200be\u2028f", "-- a--b --- c----d",
  "x\u2003y\u2000\u2000z", "caf\u00e9 noir, cafe\u0301 noir<|end|>Caf\u00e9 noir",
  "x\u00b2 \u00bd \u2460 \u0663\u0664\u0665 10\u00b2\u00b3 \u216b",
];

// A long random text over an alphabet of the cases above, the same every run (a fixed LCG).
function random_text(length) {
  const alphabet = [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?-_()#$%",
    " ", " ", " ", "  ", "\n", "\n\n", "\r\n", "\t", "'", "'s", "'S", "'ll", "'T", "é", "e\u0301", "ñ", "ß", "ſ",
    "A\u030a", "東", "京", "中", "。", "🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u00a0", "\u3000", "\u2009", "\u200b", "Ж", "α", "ب",
    "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<mask>", "<sep>", "hello world", "Hello",
    " today", "!!!", "\u0000", "\u007f"];
  let seed = 20240607, text = "";
  while (text.length < length) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    text += alphabet[Math.floor((seed / 2147483648) * alphabet.length)];
  }
  return text;
}
TEXTS.push(random_text(3000));
const styles = make_styles();
const expected = { made_by, tokenizers: {} };
for (const [name, { json, config }] of Object.entries(styles)) {
  const dir = join(here, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(json, null, 1) + "\n");
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 1) + "\n");
  const tok = Tokenizer.fromString(JSON.stringify(json));
  const cases = [];
  for (const text of TEXTS) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    cases.push({ text, ids, decoded: await tok.decode(ids, false) });
  }
  expected.tokenizers[name] = cases;
  if (js) {  // a port, not the library: e.g. its Digits splits at ASCII digits only (Rust's at \p{N})
    const other = new js.Tokenizer(json, config);
    const differ = cases.filter((c) => JSON.stringify(other.encode(c.text, { add_special_tokens: false }).ids) !==
                                       JSON.stringify(c.ids));
    console.log(`${name}: Tokenizers.js ${js.version} gives the same ids for ${cases.length - differ.length} of ` +
                `${cases.length} texts` + differ.map((c) => "\n  differs: " + JSON.stringify(c.text).slice(0, 70)).join(""));
  }
}
// One case a line, so that a change of the data reads as a diff of the cases it touches.
const lines = Object.entries(expected.tokenizers).map(([name, cases]) =>
  `  ${JSON.stringify(name)}: [\n` + cases.map((c) => "   " + JSON.stringify(c)).join(",\n") + "\n  ]");
writeFileSync(join(here, "expected.json"),
  `{"made_by": ${JSON.stringify(made_by)},\n "tokenizers": {\n${lines.join(",\n")}\n }\n}\n`);
console.log(`wrote ${Object.keys(styles).join(", ")} and expected.json (${made_by})`);
