"""jsonargparse's and other libraries' messages read as one sentence about what the user typed: the one place that
knows their wording (jsonargparse lists every type it tried, nested for class paths)."""

import difflib
import importlib
import inspect
import re

from jsonargparse import ArgumentError

# What jsonargparse writes around an error's reason: the types it tried, the values it was given.
NOISE = ("Parser key", "Does not validate", "Subtypes:", "Errors:", "Given value", "Problem with given class_path")
NOISE += ("Expected a <class 'NoneType'>",)


def first_line(error: BaseException) -> str:
    """What an error says is wrong, in a line: its first, or jsonargparse's reason without its lists of types."""
    text = str(error)
    lines = (line.strip().removeprefix("- ") for line in text.splitlines())
    reason = next((line for line in lines if line and not line.startswith(NOISE)), type(error).__name__)
    reason = re.sub(r".*callable class: |\. Got value: .*", "", reason).rstrip(".")  # a network's import error
    keys = re.findall(r'Parser key "([^"]+)":', text)
    return f"{keys[-1]}: {reason}" if len(keys) > 1 else reason


NETWORK_RULE = (
    "a network of this template takes the shape of one sample and the number of classes as its first two arguments "
    "and gives one score per class for each sample, e.g. MyNet(input_shape, num_classes, width=64)"
)

KINDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a text"}
EXAMPLES = {
    "--net": " (e.g. mnist_lightning.model.SimpleNN) whose first two arguments are the shape of one sample and the "
    "number of classes",
    "--data": " (e.g. mnist_lightning.datamodule.MNISTDataModule)",
}
SYNONYMS = {"learning_rate": "lr", "epochs": "max_epochs", "num_epochs": "max_epochs", "gpus": "devices"}


def closest(name: str, options: list[str]) -> list[str]:
    """The options a user probably meant by ``name``: its usual other name, those it begins, or the most similar."""
    if name in SYNONYMS:
        return [SYNONYMS[name]]
    return [option for option in options if option.startswith(name)] or difflib.get_close_matches(name, options, 1)


def explain(error: ArgumentError | str) -> str:
    """jsonargparse's message about one option as one sentence about the flag a user typed."""
    text = " ".join(str(error).split())
    if not (match := re.match(r'Parser key "([^"]+)": (.*)', text)):
        return text.rstrip(".") + "."
    flag, problem = f"--{match[1]}", match[2]
    # An argument of a class given by class path (--data.val_size, --net.width): its message nests in the class's.
    owner = r"(?:Problem with given class_path '[^']+':|expects a function or a callable class:)"
    # (without what jsonargparse adds after it: the other union member, the whole value given, or for --net the
    # whole Namespace)
    rest = r"(?: - Expected a <class .NoneType.>.*| Given value type: .*|\. Got value: Namespace\(.*)?$"
    if inner := re.search(owner + r' Parser key "([^"]+)": (.*?)' + rest, problem):
        return explain(f'Parser key "{match[1]}.{inner[1]}": {inner[2]}')
    # The value: as jsonargparse shows it (a list or a mapping too), or as int(), float() or a restricted type did
    shown = r"(?:Given|Got) value: (\[.*\]|\{.*\}|\S+)$"
    given = re.search(shown + r"|(?:10|float): '(.*)'$|: (\S+) not an? (?:integer|number)$", problem)
    value = next((group for group in given.groups() if group), "") if given else ""
    path = re.search(r"class_path[ =]'([^']+)'", problem)
    if (option := re.search(r"(?:Option|Key) '([^']+)' is not (?:accepted|expected)", problem)) and path:
        return not_an_argument(flag, option[1], path[1])
    takes = f"{flag} takes the class path of a"
    if subclass := re.search(r"does not correspond to a subclass of (\w+)", problem):
        return f"{flag} {value} is not a {subclass[1]}. {takes} {subclass[1]}{EXAMPLES.get(flag, '')}."
    if unbuilt := re.search(
        r"(?:callable class|class_path '[^']+'): (.*?)\.? (?:- Expected a|Got value|Given value)", problem
    ):
        why = unbuilt[1]
        return f"{flag} {value} cannot be built: {why}. {takes} class Python can import{EXAMPLES.get(flag, '')}."
    # jsonargparse's restricted types (PositiveInt, ClosedUnitInterval, ...), alone or in a union with None
    if bound := re.search(r"Not of type \w+: (?:(\S+) )?does not conform to restriction (v\S+(?: and v\S+)?)", problem):
        words = {"v>=": "at least ", "v<=": "at most ", "v>": "above ", "v<": "below "}
        rule = re.sub(r"v[<>]=?", lambda sign: words[sign[0]], bound[2])
        return f"{flag} {bound[1] or value} is out of range: it must be {rule}."
    if number := re.search(r"Not of type \w+: .*?(for int|not an integer|could not convert|not a number)", problem):
        whole = number[1] in ("for int", "not an integer")  # an int type's refusals, else a float type's
        return not_whole(flag, value) if whole else f"{flag} {value} is not a number."
    if choices := re.fullmatch(r"Expected a typing\.Literal\[(.*?)\]\. Got value: (.*)", problem):
        return f"{flag} {choices[2]} is not one of the choices: {choices[1].replace(chr(39), '')}."
    kinds = []
    for expected in re.findall(r"Expected a (typing\.Literal\[.*?\]|<class '[\w.]+'>|<class 'list'>)", problem):
        if literal := re.match(r"typing\.Literal\[(.*)\]", expected):
            kinds += [choice.strip(" '") for choice in literal[1].split(",")]
        elif (name := expected[8:-2]) == "bool":
            kinds += ["true", "false"]
        elif name in KINDS:
            kinds.append(KINDS[name])
    kinds += [
        f"the class path of a {cls} (with its arguments as {flag}.NAME VALUE)"
        for cls in re.findall(r"Subtypes: \[.*?<class '(?!jsonargparse)[\w.]*\.(\w+)'>", problem)
    ]
    if "float" in problem and re.fullmatch(r"[+-]?(inf|nan|infinity)", value, flags=re.IGNORECASE):
        return f"{flag} {value} is not a finite number."  # jsonargparse takes finite numbers only
    if set(kinds) == {KINDS["int"]}:
        return not_whole(flag, value)
    if kinds:
        return f"{flag} {value} is not {either(list(dict.fromkeys(kinds)))}."
    return f"{flag}: {problem.rstrip('.')}."


def not_whole(flag: str, value: str) -> str:
    """Not a whole number, or one written as a float (1e9): its digits, if the float holds them exactly (not 1e30)."""
    try:
        whole = float(value).is_integer() and abs(float(value)) < 2**53
    except ValueError:
        whole = False
    if not whole and re.fullmatch(r"[+-]?\d+(\.0*)?(e\+?\d+)?", value.lower()):
        return f"{flag} {value} is not a whole number as written: write it in digits."
    return f"{flag} {value} is not a whole number" + (f" as written: write {int(float(value))}." if whole else ".")


def either(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " or " * (len(items) > 1) + items[-1]


def not_an_argument(flag: str, name: str, class_path: str) -> str:
    """``--net.NAME`` or ``--data.NAME`` that the class does not take: what it does take."""
    if name == "class_path":  # jsonargparse's word for arguments written beside class_path, not under init_args
        example = "{class_path: CLASS, init_args: {NAME: VALUE}}"
        return (
            f"The arguments of {flag} in a config file go under init_args: (`{flag[2:]}: {example}`), not beside "
            "class_path."
        )
    try:
        module, _, attribute = class_path.rpartition(".")
        parameters = inspect.signature(getattr(importlib.import_module(module), attribute)).parameters.values()
    except Exception:  # not importable or not inspectable here: jsonargparse's own words
        return f"{flag}.{name} is not an argument of {class_path}."
    named = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    sizes = named[:2] if flag == "--net" else []  # what the data module gives every network
    if name in sizes:
        return (
            f"{flag}.{name} is not an option: the first two arguments of {class_path} ({', '.join(sizes)}) are "
            f"given by the data module (--data). {NETWORK_RULE[0].upper()}{NETWORK_RULE[1:]}; its other arguments "
            f"are {flag}.NAME VALUE."
        )
    options = [f"{flag}.{option}" for option in named if option not in sizes and option != "batch_size"]
    takes = f"it takes {', '.join(options)}" if options else "it takes no other arguments"
    return f"{flag}.{name} is not an argument of {class_path}: {takes}."
