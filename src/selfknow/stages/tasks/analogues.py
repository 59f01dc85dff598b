"""Offline analogues of LADDER's extension tasks (§3, §F.1-F.2, Table 32) for the offline
default's panel, written in each benchmark's own hub row schema so that the benchmark's loader
and scorer (the sibling modules) read and score them exactly as they read and score the real rows:

- GSM8K's role (`gsm8k_rows`): one-step arithmetic word problems with small numbers; the
  solution ends in "#### <number>" as GSM8K's do;
- HumanEval's role (`humaneval_rows`): tiny one-line Python functions (signature and
  docstring as the prompt, a canonical body, a `check(candidate)` with asserts), checked by
  running them in the sandbox;
- BFCL's role (`bfcl_rows`): one templated request per item against one documented function
  (BFCL's "simple" category), its possible answers in BFCL's possible-answer schema, checked
  by AST.

Everything is drawn from `numpy.random.default_rng(seed)`, so the items are fixed by the
config's seed. The same rows are the rehearsal's stand-ins for the real datasets.
"""
from __future__ import annotations

import numpy as np

#: what each analogue is, for the table notes ("stands for" the benchmark of its key)
ANALOGUES = {
    "gsm8k": "offline analogue of GSM8K: one-step arithmetic word problems, scored by the final number",
    "humaneval": "offline analogue of HumanEval: one-line Python functions, run against their asserts in the sandbox",
    "bfcl": "offline analogue of BFCL simple: templated requests to one documented function, calls compared by AST",
}

_NAMES = ("Ana", "Bo", "Cyr", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia")
_THINGS = ("apples", "stamps", "marbles", "books", "coins", "shells", "pencils", "cards")

# (template, operation): a and b are drawn so that the answer is a positive whole number
_ARITHMETIC = (
    ("{n} has {a} {t}. {n} buys {b} more {t}. How many {t} does {n} have now?", "add"),
    ("{n} has {a} {t} and gives {b} of them away. How many {t} does {n} have left?", "sub"),
    ("{n} fills {a} boxes with {b} {t} each. How many {t} are in the boxes?", "mul"),
    ("{n} shares {p} {t} equally among {b} friends. How many {t} does each friend get?", "div"),
)

# (name, docstring, body, arguments -> expected result): one-line functions of one argument
_FUNCTIONS = (
    ("add_{k}", "Return x plus {k}.", "return x + {k}", lambda x, k: x + k),
    ("times_{k}", "Return x multiplied by {k}.", "return x * {k}", lambda x, k: x * k),
    ("minus_{k}", "Return x minus {k}.", "return x - {k}", lambda x, k: x - k),
    ("is_multiple_of_{k}", "Return True if x is a multiple of {k}, else False.", "return x % {k} == 0",
     lambda x, k: x % k == 0),
    ("square_plus_{k}", "Return the square of x plus {k}.", "return x * x + {k}", lambda x, k: x * x + k),
)

_CITIES = ("Oslo", "Lima", "Quito", "Hanoi", "Dakar", "Perth", "Riga", "Accra", "Tunis", "Bern")
_CURRENCIES = ("USD", "EUR", "JPY", "GBP", "CHF", "INR")


def gsm8k_rows(n: int, seed: int) -> list[dict]:
    """`n` GSM8K-schema rows (question, answer = a worked line and "#### <number>")."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        template, op = _ARITHMETIC[i % len(_ARITHMETIC)]
        name, thing = str(rng.choice(_NAMES)), str(rng.choice(_THINGS))
        a, b = int(rng.integers(2, 10)), int(rng.integers(2, 10))
        if op == "sub":
            a += b
        product = a * b
        question = template.format(n=name, t=thing, a=a, b=b, p=product)
        work = {"add": (f"{a} + {b}", a + b), "sub": (f"{a} - {b}", a - b), "mul": (f"{a} * {b}", a * b),
                "div": (f"{product} / {b}", a)}[op]
        rows.append({"question": question, "answer": f"{work[0]} = {work[1]}\n#### {work[1]}"})
    return rows


def humaneval_rows(n: int, seed: int) -> list[dict]:
    """`n` HumanEval-schema rows (task_id, prompt, canonical_solution, test, entry_point)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        name, doc, body, f = _FUNCTIONS[i % len(_FUNCTIONS)]
        k = int(rng.integers(2, 10))
        entry = name.format(k=k)
        args = [int(x) for x in rng.integers(-20, 21, size=3)]
        asserts = "".join(f"    assert candidate({x}) == {f(x, k)!r}\n" for x in args)
        rows.append({"task_id": f"WorldEval/{i}",
                     "prompt": f'def {entry}(x):\n    """{doc.format(k=k)}"""\n',
                     "canonical_solution": f"    {body.format(k=k)}\n",
                     "test": f"def check(candidate):\n{asserts}",
                     "entry_point": entry})
    return rows


def _function_doc(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"name": name, "description": description,
            "parameters": {"type": "dict", "properties": properties, "required": required}}


def bfcl_rows(n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """`n` BFCL "simple" items: the questions file's rows (id, question, function) and the
    possible-answer file's rows (id, ground_truth), paired by id."""
    rng = np.random.default_rng(seed)
    questions, answers = [], []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            city, unit = str(rng.choice(_CITIES)), str(rng.choice(["celsius", "fahrenheit"]))
            doc = _function_doc("get_weather", "Current weather of a city.",
                                {"city": {"type": "string", "description": "The city name."},
                                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                                          "description": "Temperature unit; default celsius."}}, ["city"])
            text = f"What is the weather in {city} right now, in {unit}?"
            truth = {"get_weather": {"city": [city], "unit": [unit] + ([""] if unit == "celsius" else [])}}
        elif kind == 1:
            amount = int(rng.integers(5, 500))
            src, dst = (str(c) for c in rng.choice(_CURRENCIES, size=2, replace=False))
            doc = _function_doc("convert_currency", "Convert an amount of money between currencies.",
                                {"amount": {"type": "integer", "description": "The amount to convert."},
                                 "from_currency": {"type": "string", "description": "Currency code to convert from."},
                                 "to_currency": {"type": "string", "description": "Currency code to convert to."}},
                                ["amount", "from_currency", "to_currency"])
            text = f"How much is {amount} {src} in {dst}?"
            truth = {"convert_currency": {"amount": [amount], "from_currency": [src], "to_currency": [dst]}}
        else:
            width, height = int(rng.integers(2, 40)), int(rng.integers(2, 40))
            doc = _function_doc("rectangle_area", "Area of a rectangle.",
                                {"width": {"type": "integer", "description": "Width of the rectangle."},
                                 "height": {"type": "integer", "description": "Height of the rectangle."}},
                                ["width", "height"])
            text = f"Compute the area of a rectangle {width} wide and {height} high."
            truth = {"rectangle_area": {"width": [width], "height": [height]}}
        qid = f"simple_{i}"
        questions.append({"id": qid, "question": [[{"role": "user", "content": text}]], "function": [doc]})
        answers.append({"id": qid, "ground_truth": [truth]})
    return questions, answers

