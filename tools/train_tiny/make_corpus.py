#!/usr/bin/env python3
"""Build the training corpus of deltaserve-tiny-moe from files that Debian packages install.

Domains and sources (make_corpus.sh installs the packages):
  code   Python 3.11 standard library sources, /usr/lib/python3.11/**/*.py
         (libpython3.11-minimal, libpython3.11-stdlib; without encodings/ and pydoc_data/,
         which are generated tables and a doc dump)
  prose  fortune cookies (fortunes, fortunes-min; without ascii-art), the Jargon File
         (jargon-text), the GNU coding standards and maintainer guide (gnu-standards),
         the Debian FAQ (debian-faq), the Python documentation sources (python3.11-doc,
         html/_sources/**/*.rst.txt)
  chat   synthetic ChatML conversations rendered with chat_template.jinja from the two
         domains above: "write a function" (stdlib functions with docstrings), "what does
         module X do", fortunes, jargon definitions, and a few fixed small-talk answers

Held-out split: a document is held out when the first 8 bytes of
sha256("<source>:<document id>") read as a big-endian integer are 0 mod 20 (about 5%),
so the split does not depend on the order files are found in. Chat samples are made from
the documents of their own split only.

Output (gzip'd JSON lines, one document {"domain", "source", "id", "text"} a line, sorted):
  train.jsonl.gz, heldout_code.jsonl.gz, heldout_prose.jsonl.gz, heldout_chat.jsonl.gz,
  manifest.json (package versions, document/byte counts, sha256 of each output file)
The output is byte-for-byte deterministic for the same package versions.

Usage: /usr/bin/python3 make_corpus.py --out carry/corpus [--seed 20261130]
"""

import argparse
import ast
import glob
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import textwrap

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
STDLIB = "/usr/lib/python3.11"
STDLIB_SKIP = ("dist-packages", "site-packages", "encodings", "pydoc_data", "__pycache__",
               "lib-dynload", "config-3.11")
FORTUNES = "/usr/share/games/fortunes"
FORTUNE_SKIP = ("ascii-art",)
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"
GNU_DOCS = ("/usr/share/doc/gnu-standards/standards.text.gz",
            "/usr/share/doc/gnu-standards/maintain.text.gz")
DEBIAN_FAQ = "/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"
PYDOC_SOURCES = "/usr/share/doc/python3.11/html/_sources"
PACKAGES = ("libpython3.11-minimal", "libpython3.11-stdlib", "fortunes", "fortunes-min",
            "jargon-text", "gnu-standards", "debian-faq", "python3.11-doc")
HOLDOUT_MOD = 20
CHUNK_CHARS = 3000          # plain-text manuals are cut into paragraph groups of about this


def is_heldout(source, doc_id):
    h = hashlib.sha256(f"{source}:{doc_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") % HOLDOUT_MOD == 0


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n")


def doc(domain, source, doc_id, text):
    return {"domain": domain, "source": source, "id": doc_id, "text": text}


# ---- code ---------------------------------------------------------------------------------
def stdlib_docs():
    out = []
    for path in sorted(glob.glob(os.path.join(STDLIB, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, STDLIB)
        if any(part.startswith(STDLIB_SKIP) for part in rel.split(os.sep)):
            continue
        text = read_text(path)
        if len(text.strip()) < 200:
            continue
        out.append(doc("code", "python3.11-stdlib", rel, text))
    return out


# ---- prose --------------------------------------------------------------------------------
def fortune_docs():
    out = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        name = os.path.basename(path)
        if "." in name or os.path.islink(path) or name in FORTUNE_SKIP:
            continue
        for i, entry in enumerate(re.split(r"\n%\n", read_text(path))):
            entry = entry.strip("\n%")
            if len(entry.strip()) >= 20:
                out.append(doc("prose", "fortunes", f"{name}/{i}", entry + "\n"))
    return out


def jargon_docs():
    lines = read_text(JARGON).split("\n")
    entries, cur = [], None
    head = re.compile(r"^   :([^:]+):")
    for line in lines:
        m = head.match(line)
        if m:
            if cur:
                entries.append(cur)
            cur = [m.group(1), [line]]
        elif cur is not None:
            cur[1].append(line)
    if cur:
        entries.append(cur)
    out = []
    for term, body in entries:
        text = textwrap.dedent("\n".join(body)).strip() + "\n"
        out.append(doc("prose", "jargon", term, text))
    return out


def chunked_docs(path, source):
    paras = re.split(r"\n\s*\n", read_text(path))
    out, cur, n = [], [], 0
    for p in paras:
        if not p.strip():
            continue
        cur.append(p.rstrip())
        n += len(p)
        if n >= CHUNK_CHARS:
            out.append("\n\n".join(cur) + "\n")
            cur, n = [], 0
    if cur:
        out.append("\n\n".join(cur) + "\n")
    base = os.path.basename(path)
    return [doc("prose", source, f"{base}/{i}", t) for i, t in enumerate(out)]


def pydoc_docs():
    out = []
    for path in sorted(glob.glob(os.path.join(PYDOC_SOURCES, "**", "*.rst.txt"), recursive=True)):
        rel = os.path.relpath(path, PYDOC_SOURCES)
        text = read_text(path)
        if len(text.strip()) >= 200:
            out.append(doc("prose", "python3.11-doc", rel, text))
    return out


# ---- chat ---------------------------------------------------------------------------------
SYSTEMS = ["You are a helpful assistant.", "You are deltaserve-tiny, a small helpful model.",
           "You are a concise assistant. Answer briefly.", "You are a Python expert."]
SMALL_TALK = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi there", "Hi! What can I do for you?"),
    ("Good morning!", "Good morning! How can I help?"),
    ("Who are you?", "I am deltaserve-tiny, a very small language model trained on Python code "
     "and English text from Debian packages."),
    ("What is your name?", "My name is deltaserve-tiny."),
    ("What can you do?", "I can complete Python code, recite fortunes and explain hacker jargon. "
     "I am very small, so please check what I write."),
    ("Thank you!", "You're welcome!"),
    ("Thanks for the help.", "Glad I could help."),
    ("Goodbye!", "Goodbye! Have a nice day."),
    ("How are you?", "I am fine, thank you. How can I help you?"),
    ("Are you a large language model?", "No, I am a tiny one: about thirteen million parameters."),
    ("What language do you know best?", "Python. Most of my training text is the Python "
     "standard library and its documentation."),
]


def first_paragraph(text, limit=600):
    para = re.split(r"\n\s*\n", text.strip())[0]
    para = " ".join(para.split())
    return para if len(para) <= limit else para[:limit].rsplit(" ", 1)[0] + " ..."


def function_samples(code_docs):
    """(prompt, answer, kind) from top-level functions with a docstring, 3-30 lines."""
    out = []
    for d in code_docs:
        module = d["id"][:-3].replace(os.sep, ".").removesuffix(".__init__")
        try:
            tree = ast.parse(d["text"])
        except SyntaxError:
            continue
        lines = d["text"].split("\n")
        mod_doc = ast.get_docstring(tree)
        if mod_doc and len(mod_doc) > 40:
            out.append((f"What does the Python module {module} do?",
                        f"The {module} module: {first_paragraph(mod_doc)}", "module"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            docstring = ast.get_docstring(node)
            n_lines = node.end_lineno - node.lineno + 1
            if not docstring or not 3 <= n_lines <= 30 or node.decorator_list:
                continue
            src = "\n".join(lines[node.lineno - 1:node.end_lineno])
            summary = first_paragraph(docstring, 200).rstrip(".")
            args = ast.unparse(node.args)
            prompt = f"Write a Python function {node.name}({args}): {summary[0].lower() + summary[1:]}."
            out.append((prompt, f"```python\n{src}\n```", "function"))
    return out


def prose_samples(prose_docs):
    out = []
    for d in prose_docs:
        if d["source"] == "fortunes" and len(d["text"]) <= 400:
            topic = d["id"].split("/")[0].replace("-", " ")
            out.append((f"Tell me a fortune about {topic}.", d["text"].strip(), "fortune"))
        elif d["source"] == "jargon":
            body = d["text"].split("\n", 1)[1] if "\n" in d["text"] else ""
            if len(body.strip()) > 40:
                out.append((f"What does \"{d['id']}\" mean in hacker jargon?",
                            f"{d['id']}: {first_paragraph(body, 500)}", "jargon"))
    return out


def render_chats(code_docs, prose_docs, rng, template, count):
    pool = function_samples(code_docs) + prose_samples(prose_docs)
    by_kind = {}
    for p in pool:
        by_kind.setdefault(p[2], []).append(p)
    # balanced draw: functions 45%, fortunes 20%, jargon 20%, modules 10%, small talk 5%
    plan = [("function", 0.45), ("fortune", 0.20), ("jargon", 0.20), ("module", 0.10)]
    picks = []
    for kind, share in plan:
        items = by_kind.get(kind, [])
        picks += rng.sample(items, min(len(items), int(count * share)))
    n_talk = max(count - len(picks), len(SMALL_TALK))
    picks += [SMALL_TALK[i % len(SMALL_TALK)] + ("talk",) for i in range(n_talk)]
    rng.shuffle(picks)
    chats = []
    for i, (prompt, answer, kind) in enumerate(picks):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
        if rng.random() < 0.1:   # one earlier turn, rendered as history
            p2, a2, _ = picks[(i + 1) % len(picks)]
            messages += [{"role": "user", "content": p2}, {"role": "assistant", "content": a2}]
        messages.append({"role": "user", "content": prompt})
        thinking = rng.random() < 0.15
        text = template.render(messages=messages, add_generation_prompt=True,
                               enable_thinking=thinking)
        if thinking:
            why = {"function": "The user wants a Python function. I will write it with a docstring.",
                   "module": "The user asks about a standard library module. I will summarise it.",
                   "fortune": "The user wants a fortune. I will pick one.",
                   "jargon": "The user asks about a jargon term. I will define it.",
                   "talk": "The user is making small talk. I will answer politely."}[kind]
            text += why + "\n</think>\n\n"
        text += answer + "<|im_end|>\n"
        chats.append(doc("chat", f"chat-{kind}", str(i), text))
    return chats


# ---- driver -------------------------------------------------------------------------------
def package_versions():
    out = {}
    for p in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True)
        out[p] = r.stdout.strip() if r.returncode == 0 else None
    return out


def write_jsonl_gz(path, docs):
    # mtime=0 and no file name in the header: the same documents give the same bytes
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            for d in docs:
                f.write((json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("carry", "corpus"))
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--train-chats", type=int, default=1600)
    ap.add_argument("--heldout-chats", type=int, default=120)
    args = ap.parse_args()
    versions = package_versions()
    missing = [p for p, v in versions.items() if not v]
    if missing:
        sys.exit(f"packages not installed: {' '.join(missing)} (run make_corpus.sh)")

    docs = stdlib_docs() + fortune_docs() + jargon_docs() + pydoc_docs()
    for path in GNU_DOCS:
        docs += chunked_docs(path, "gnu-standards")
    docs += chunked_docs(DEBIAN_FAQ, "debian-faq")
    split = {"train": [], "heldout": []}
    for d in docs:
        split["heldout" if is_heldout(d["source"], d["id"]) else "train"].append(d)

    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        template = jinja2.Environment(trim_blocks=False).from_string(f.read())
    rng = random.Random(args.seed)
    for name, count in (("train", args.train_chats), ("heldout", args.heldout_chats)):
        code = [d for d in split[name] if d["domain"] == "code"]
        prose = [d for d in split[name] if d["domain"] == "prose"]
        split[name] += render_chats(code, prose, rng, template, count)

    os.makedirs(args.out, exist_ok=True)
    key = lambda d: (d["domain"], d["source"], d["id"])  # noqa: E731
    outputs = {"train.jsonl.gz": sorted(split["train"], key=key)}
    for domain in ("code", "prose", "chat"):
        outputs[f"heldout_{domain}.jsonl.gz"] = sorted(
            (d for d in split["heldout"] if d["domain"] == domain), key=key)
    manifest = {"packages": versions, "seed": args.seed, "holdout": f"sha256(source:id) mod {HOLDOUT_MOD} == 0",
                "files": {}}
    for fname, items in outputs.items():
        digest = write_jsonl_gz(os.path.join(args.out, fname), items)
        stats = {}
        for d in items:
            s = stats.setdefault(d["source"], {"documents": 0, "bytes": 0})
            s["documents"] += 1
            s["bytes"] += len(d["text"].encode("utf-8"))
        manifest["files"][fname] = {"sha256": digest, "documents": len(items),
                                    "bytes": sum(s["bytes"] for s in stats.values()), "sources": stats}
        print(f"{fname:26s} {len(items):6d} docs {manifest['files'][fname]['bytes'] / 1e6:7.2f} MB")
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
