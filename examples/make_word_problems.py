"""Writes examples/word_problems/{train,test}.jsonl: one-step word problems on small numbers, from a fixed seed, so
the "bring your own" example ships data a 135M instruct model can partly solve.
Run: python examples/make_word_problems.py"""

import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kira", "Liam"]
ITEMS = ["apples", "books", "coins", "pencils", "stickers", "marbles", "cards", "shells"]
TEMPLATES = [
    ("{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", lambda a, b: a + b, "add"),
    ("{name} has {a} {item} and gives away {b}. How many {item} are left?", lambda a, b: a - b, "subtract"),
    ("{name} buys {a} bags with {b} {item} in each. How many {item} is that?", lambda a, b: a * b, "multiply"),
]


def rows(rng: random.Random, n: int, seen: set) -> list[dict]:
    out = []
    while len(out) < n:
        template, op, kind = rng.choice(TEMPLATES)
        a, b = rng.randint(2, 20), rng.randint(2, 9)
        if kind == "subtract" and b >= a:
            continue
        question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
        if question not in seen:
            seen.add(question)
            out.append({"question": question, "answer": str(op(a, b)), "operation": kind})
    return out


if __name__ == "__main__":
    rng, seen = random.Random(0), set()
    folder = Path(__file__).parent / "word_problems"
    folder.mkdir(exist_ok=True)
    for split, n in (("train", 600), ("test", 200)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(rng, n, seen)))
