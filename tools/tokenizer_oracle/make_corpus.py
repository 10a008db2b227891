#!/usr/bin/env python3
"""Writes the tokenizer oracle corpus: >= 10,000 strings, deterministic (seeded).

Usage (from the repository root, with Debian's python3):
    /usr/bin/python3 tools/tokenizer_oracle/make_corpus.py [--out PATH] [--seed N]

Output: JSON Lines, one object per string:
    {"id": 17, "cat": "english", "text": "..."}
    {"id": 18, "cat": "odd", "text": "e\u0301", "nfc": "\u00e9"}
"nfc" is present only where Unicode NFC changes the text (Python's unicodedata is the
second oracle for our normaliser): decode(encode(text)) must equal "nfc" there and "text"
everywhere else. Strings with special tokens inline are always NFC already, so the
per-segment normalisation of the tokenizer and the whole-string one here agree.

Characters are drawn from scripts assigned long before Unicode 14 (the oldest Unicode
version among PCRE2, Oniguruma, Python and Node here), so every engine classifies them alike.
"""
import argparse
import json
import random
import unicodedata

ENGLISH_WORDS = """the of and to in is you that it he was for on are as with his they I at be
this have from or one had by word but not what all were we when your can said there use an
each which she do how their if will up other about out many then them these so some her would
make like him into time has look two more write go see number no way could people my than first
water been call who oil its now find long down day did get come made may part over new sound
take only little work know place year live me back give most very after thing our just name
good sentence man think say great where help through much before line right too mean old any
same tell boy follow came want show also around form three small set put end does another well
large must big even such because turn here why ask went men read need land different home us
move try kind hand picture again change off play spell air away animal house point page letter
mother answer found study still learn should America world server tokenizer latency throughput
GPU kernel stream request queue cache batch token model weights layer attention""".split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "\u2019s", "\u2019t", "'x", "''", "'"]

PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["...", "--", "\u2014", "\u2013",
                                                      "\u201c", "\u201d", "\u00ab", "\u00bb"]

COMMON_HANZI = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
                "自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与"
                "好看学进种将还分此心前面又定见只主没公从知全点机长理明关种电话高水力果实加量都两"
                "体制样干工东西开手回些本什你把世界今天我们服务器模型推理速度数据问题时间中文测试"
                "语言计算程序设计研究发展经济社会文化历史科学技术网络安全系统用户")
CJK_PUNCT = list("\uff0c\u3002\uff01\uff1f\u3001\uff1b\uff1a\u300c\u300d\u300e\u300f\u300a"
                 "\u300b\uff08\uff09\u3010\u3011\u2026\u00b7")
HIRAGANA = [chr(c) for c in range(0x3041, 0x3097)]
KATAKANA = [chr(c) for c in range(0x30A1, 0x30FB)] + ["\u30fc"]
HALFWIDTH_KATAKANA = [chr(c) for c in range(0xFF66, 0xFF9E)]
KANJI = list("日本語東京大阪時間学校先生今日明日私名前電車会社仕事新聞映画音楽食事天気元気友達"
             "家族旅行駅店車山川花火雨雪風空海月星光")
JAPANESE_PHRASES = ["こんにちは", "ありがとうございます", "すみません", "おはようございます",
                    "東京都", "コンピューター", "プログラミング", "トークナイザー", "です。", "ます。"]

EMOJI = ["\U0001F600", "\U0001F602", "\U0001F60D", "\U0001F914", "\U0001F44D", "\U0001F44B",
         "\U0001F389", "\U0001F680", "\U0001F525", "\u2764\ufe0f", "\u2728", "\u2705", "\u26a1",
         "\U0001F40D", "\U0001F355", "\U0001F30D", "\U0001F4A9", "\U0001F916", "\U0001F9E0",
         "\u263a", "\u2603", "\U0001F6A8", "\U0001F4BB", "\U0001F4F1", "\U0001F3B5"]
SKIN_TONES = [chr(c) for c in range(0x1F3FB, 0x1F400)]
ZWJ_SEQUENCES = [
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",  # family
    "\U0001F469\u200d\U0001F4BB",                                  # woman technologist
    "\U0001F3F3\ufe0f\u200d\U0001F308",                            # rainbow flag
    "\U0001F441\ufe0f\u200d\U0001F5E8\ufe0f",                      # eye in speech bubble
    "\U0001F9D1\U0001F3FD\u200d\U0001F680",                        # astronaut, medium skin
    "\U0001F468\U0001F3FB\u200d\u2764\ufe0f\u200d\U0001F48B\u200d\U0001F468\U0001F3FF",
    "\U0001F415\u200d\U0001F9BA",                                  # service dog
    "\u2764\ufe0f\u200d\U0001F525",                                # heart on fire
]
FLAGS = ["\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "\U0001F1E8\U0001F1F3",
         "\U0001F1E9\U0001F1EA", "\U0001F1EB\U0001F1F7", "\U0001F1E7\U0001F1F7"]
KEYCAPS = ["#\ufe0f\u20e3", "1\ufe0f\u20e3", "*\ufe0f\u20e3"]
TAG_FLAG = "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"

WHITESPACE = [" ", " ", " ", "\t", "\n", "\n", "\r\n", "\r", "\x0b", "\x0c", "\u00a0", "\u2002",
              "\u2003", "\u2009", "\u200a", "\u3000", "\u2028", "\u2029", "\u202f", "\u205f",
              "\u1680", "\u180e", "\u0085"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                  "<|box_end|>", "<|vision_pad|>", "<|image_pad|>", "<tool_call>",
                  "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                  "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                  "<think>", "</think>"]
NEAR_SPECIAL = ["<|im_", "<|im_end|", "<|IM_END|>", "< |im_end|>", "<think", "think>",
                "<|>", "<||>", "</think", "<<|im_end|>>", "<|endoftext|", "|>", "<|"]

# Old, well-established scripts: (first, last) code point ranges.
SCRIPT_RANGES = {
    "latin_ext": (0x00C0, 0x024F), "greek": (0x0391, 0x03C9), "cyrillic": (0x0410, 0x044F),
    "armenian": (0x0531, 0x0587), "hebrew": (0x05D0, 0x05EA), "arabic": (0x0621, 0x064A),
    "devanagari": (0x0905, 0x0939), "bengali": (0x0985, 0x09B9), "tamil": (0x0B85, 0x0BB9),
    "thai": (0x0E01, 0x0E3A), "georgian": (0x10D0, 0x10FA), "hangul": (0xAC00, 0xD7A3),
    "ethiopic": (0x1200, 0x1248), "cherokee": (0x13A0, 0x13F4), "math_alnum": (0x1D400, 0x1D6A5),
    "box": (0x2500, 0x257F), "arrows": (0x2190, 0x21FF), "math_ops": (0x2200, 0x22FF),
}
COMBINING = [chr(c) for c in range(0x0300, 0x0370)]
ODD_SINGLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\u202d",
               "\u200e", "\u200f", "\ufffd", "\ue000", "\uf8ff", "\U000F0000", "\ufe0f",
               "\ufe0e", "\u0000", "\x01", "\x1b", "\x7f", "\u0085", "\u061c", "\U0001D11E",
               "\u2126", "\u212b", "\u212a", "\uf900", "\U0002FA1D", "\u0958", "\u1e9b\u0323",
               "\u0344", "\u0f73", "\u00c5", "\u1100\u1161\u11a8", "\u1100\u1161", "\u304b\u3099",
               "\u30cf\u309a", "\u0041\u030a", "\u0065\u0301", "\u006f\u0308\u0304",
               "\u0627\u0653", "\u0915\u093c", "\u05e9\u05c1\u05b8", "\u0e40\u0e01\u0e49\u0e32"]


def script_text(rng, name, n):
    lo, hi = SCRIPT_RANGES[name]
    out = []
    while len(out) < n:
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            out.append(c)
    return "".join(out)


def english(rng):
    words = []
    for i in range(rng.randint(3, 40)):
        w = rng.choice(ENGLISH_WORDS)
        r = rng.random()
        if r < 0.15:
            w = w.capitalize()
        elif r < 0.2:
            w = w.upper()
        if rng.random() < 0.08:
            w += rng.choice(CONTRACTIONS)
        if rng.random() < 0.12:
            w += rng.choice(PUNCT)
        words.append(w)
    sep = " " if rng.random() < 0.8 else rng.choice(["  ", " \n", "\n", "\t"])
    text = sep.join(words)
    if rng.random() < 0.1:
        text += rng.choice([" https://example.com/a/b?x=1&y=2", " user@example.org",
                            " e.g. i.e. etc.", " ($12.50)", " 100%"])
    return text


CODE_TEMPLATES = [
    "def {f}({a}, {b}=None):\n    \"\"\"{doc}\"\"\"\n    if {a} is None:\n        return []\n    return [{a} * {n} for _ in range({b})]\n",
    "int {f}(const std::vector<int>& {a}) {{\n\tint {b} = 0;\n\tfor (int x : {a}) {b} += x * {n};\n\treturn {b};\n}}\n",
    "const {f} = async ({a}) => {{\r\n  const {b} = await fetch(`/api/${{{a}}}`);\r\n  return {b}.json();\r\n}};\r\n",
    "fn {f}({a}: &str) -> Result<u{n}, Error> {{\n    let {b} = {a}.parse::<u{n}>()?;\n    Ok({b} << 2)\n}}\n",
    "{{\"{a}\": [{n}, {n}.5, -{n}e3], \"{b}\": {{\"{f}\": null, \"ok\": true}}}}",
    "<div class=\"{a}\" id=\"{b}\">\n  <span>{doc}</span>\n  <!-- {f} -->\n</div>",
    "for {a} in $(seq 1 {n}); do\n  echo \"${{{a}}}\" | grep -E '^[0-9]+$' >> {b}.log 2>&1\ndone",
    "SELECT {a}, COUNT(*) AS {b} FROM {f} WHERE {a} >= {n} GROUP BY {a} ORDER BY {b} DESC;",
    "    # {doc}\n    {a}_{b} = {{k: v for k, v in {f}.items() if v != {n}}}\n",
    "#include <stdio.h>\n\nint main(void) {{\n    printf(\"%d\\n\", {n});\n    return 0;\n}}\n",
    "x{n} := make(map[string]int)\nx{n}[\"{a}\"]++ // {doc}\n",
    "if ({a} != nullptr && {a}->{b}_ > {n}) {{ {f}({a}); }}  // TODO(x): {doc}",
]
IDENTS = ["x", "data", "tokens", "num_tokens", "kv_cache", "self", "request_id", "__init__",
          "CamelCase", "snake_case_name", "i", "j", "buf", "len_bytes", "ptr", "fooBar2"]


def code(rng):
    t = rng.choice(CODE_TEMPLATES)
    doc = " ".join(rng.choice(ENGLISH_WORDS) for _ in range(rng.randint(1, 6)))
    text = t.format(f=rng.choice(IDENTS), a=rng.choice(IDENTS), b=rng.choice(IDENTS),
                    n=rng.randint(0, 99999), doc=doc)
    if rng.random() < 0.2:
        text = text.replace("    ", "\t")
    if rng.random() < 0.2:
        text = " " * rng.randint(1, 16) + text
    return text


def chinese(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append("".join(rng.choice(COMMON_HANZI) for _ in range(rng.randint(1, 12))))
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(CJK_PUNCT))
        elif r < 0.7:
            parts.append(str(rng.randint(0, 3000)))
        elif r < 0.85:
            parts.append(" " + rng.choice(ENGLISH_WORDS) + " ")
    return "".join(parts)


def japanese(rng):
    parts = []
    for _ in range(rng.randint(2, 10)):
        r = rng.random()
        if r < 0.3:
            parts.append("".join(rng.choice(HIRAGANA) for _ in range(rng.randint(1, 6))))
        elif r < 0.5:
            parts.append("".join(rng.choice(KATAKANA) for _ in range(rng.randint(1, 6))))
        elif r < 0.65:
            parts.append("".join(rng.choice(KANJI) for _ in range(rng.randint(1, 4))))
        elif r < 0.85:
            parts.append(rng.choice(JAPANESE_PHRASES))
        elif r < 0.92:
            parts.append("".join(rng.choice(HALFWIDTH_KATAKANA) for _ in range(rng.randint(1, 5))))
        else:
            parts.append(rng.choice(CJK_PUNCT))
    return "".join(parts)


def emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.35:
            parts.append(rng.choice(EMOJI))
        elif r < 0.5:
            parts.append(rng.choice(["\U0001F44D", "\U0001F44B", "\U0001F9D1", "\u270b"]) +
                         rng.choice(SKIN_TONES))
        elif r < 0.7:
            parts.append(rng.choice(ZWJ_SEQUENCES))
        elif r < 0.8:
            parts.append(rng.choice(FLAGS))
        elif r < 0.85:
            parts.append(rng.choice(KEYCAPS + [TAG_FLAG]))
        else:
            parts.append(rng.choice([" ", " ", "\n", "!", " " + rng.choice(ENGLISH_WORDS) + " "]))
    return "".join(parts)


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.5:
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 8))))
        elif r < 0.8:
            parts.append(rng.choice(ENGLISH_WORDS))
        elif r < 0.9:
            parts.append(rng.choice(PUNCT))
        else:
            parts.append(str(rng.randint(0, 99)))
    return "".join(parts)


def digits(rng):
    r = rng.random()
    if r < 0.3:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(5, 300)))
    if r < 0.5:
        return f"{rng.randint(0, 10**9):,}.{rng.randint(0, 99):02d} and {rng.random() * 1e6:.6f}"
    if r < 0.6:
        return "+1 (%03d) %03d-%04d" % (rng.randint(0, 999), rng.randint(0, 999), rng.randint(0, 9999))
    if r < 0.7:
        return "".join(rng.choice("\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
                       for _ in range(rng.randint(1, 20)))
    if r < 0.8:
        return "".join(rng.choice("\uff10\uff11\uff12\uff13\uff14\u00b2\u00b3\u00bd\u2160\u216b")
                       for _ in range(rng.randint(1, 20)))
    return " ".join(str(rng.randint(0, 10**rng.randint(1, 18))) for _ in range(rng.randint(1, 10)))


def special(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.35:
            parts.append(rng.choice(SPECIAL_TOKENS))
        elif r < 0.5:
            parts.append(rng.choice(NEAR_SPECIAL))
        elif r < 0.8:
            parts.append(english(rng) if rng.random() < 0.7 else chinese(rng))
        else:
            parts.append(rng.choice(["\n", " ", "\n\n", "user\n", "assistant\n", " <", ">"]))
    return "".join(parts)


def odd(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.35:
            parts.append(script_text(rng, rng.choice(sorted(SCRIPT_RANGES)), rng.randint(1, 10)))
        elif r < 0.55:
            base = rng.choice("aeiouAEIOUnsczg")
            parts.append(base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 5))))
        elif r < 0.85:
            parts.append(rng.choice(ODD_SINGLES))
        else:
            parts.append(rng.choice([" ", "x", "1", "\n", ".", rng.choice(ENGLISH_WORDS)]))
    return "".join(parts)


def mixed(rng):
    gens = [english, code, chinese, japanese, emoji, whitespace, digits, special]
    return "".join(rng.choice(gens)(rng) for _ in range(rng.randint(2, 4)))


def long_text(rng):
    gens = [english, code, chinese, japanese, whitespace, digits]
    text = "".join(rng.choice(gens)(rng) + "\n" for _ in range(rng.randint(20, 40)))
    if rng.random() < 0.3:
        text += rng.choice(["a", " ", "\u4e00", "=", "\U0001F600"]) * rng.randint(500, 3000)
    return text


CATEGORIES = [("english", english, 2000), ("code", code, 1500), ("chinese", chinese, 1000),
              ("japanese", japanese, 800), ("emoji", emoji, 800), ("whitespace", whitespace, 1000),
              ("digits", digits, 600), ("special", special, 1000), ("odd", odd, 1200),
              ("mixed", mixed, 600), ("long", long_text, 30)]

FIXED = ["", " ", "\n", "a", "Hello, world!", "Hello world<|im_end|>", "<|im_start|>",
         "I'm here, you're there; they'll've it's OK", "   leading and trailing   ",
         "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
         "1234567890123", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
         "<think>\nreasoning\n</think>\n\nanswer", "tab\there\r\nCRLF\rCR", "x" * 1000]


def make(seed):
    rng = random.Random(seed)
    rows = []
    for text in FIXED:
        rows.append(("fixed", text))
    for cat, gen, count in CATEGORIES:
        for _ in range(count):
            text = gen(rng)
            # Non-NFC text only where no special token could split the normalisation.
            if cat not in ("odd", "mixed", "long", "japanese"):
                text = unicodedata.normalize("NFC", text)
            if any(t in text for t in SPECIAL_TOKENS):
                text = unicodedata.normalize("NFC", text)
            rows.append((cat, text))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/qwen3_tokenizer/corpus.jsonl")
    ap.add_argument("--seed", type=int, default=20261130)
    args = ap.parse_args()
    rows = make(args.seed)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for i, (cat, text) in enumerate(rows):
            obj = {"id": i, "cat": cat, "text": text}
            nfc = unicodedata.normalize("NFC", text)
            if nfc != text:
                obj["nfc"] = nfc
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} strings to {args.out}")


if __name__ == "__main__":
    main()
