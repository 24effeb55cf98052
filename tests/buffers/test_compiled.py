"""The rule of :func:`dspark_json.buffers.compiled.leaf`: a function compiled without reference
counting neither allocates, nor returns an array, nor calls a function that may (its caller
keeps every array alive; a leaf that held a new array would leak it or free it early)."""

import ast
import importlib
import inspect
import pkgutil

import dspark_json.parse

_ALLOCATING = {
    *("empty", "zeros", "full", "ones", "array", "concatenate", "arange", "copy", "astype"),
    *("empty_like", "zeros_like", "where", "cumsum", "nonzero", "flatnonzero", "unique"),
    *("sort", "argsort", "searchsorted", "view", "reshape"),
}


def _dispatchers():
    for info in pkgutil.walk_packages(dspark_json.parse.__path__, "dspark_json.parse."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if getattr(value, "targetoptions", None) is not None and value.__module__ == (
                module.__name__
            ):
                yield module, name, value


def _is_leaf(dispatcher) -> bool:
    return dispatcher.targetoptions.get("_nrt") is False


def test_some_kernels_are_leaves_and_some_are_not():
    kinds = {_is_leaf(d) for _, _, d in _dispatchers()}
    assert kinds == {True, False}


def test_a_leaf_calls_only_leaves_and_allocates_nothing():
    wrong = []
    for module, name, dispatcher in _dispatchers():
        if not _is_leaf(dispatcher):
            continue
        tree = ast.parse(inspect.getsource(dispatcher.py_func))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in _ALLOCATING:
                wrong.append(f"{module.__name__}.{name} calls .{func.attr}")
            if isinstance(func, ast.Name):
                callee = vars(module).get(func.id)
                if getattr(callee, "targetoptions", None) is not None and not _is_leaf(callee):
                    wrong.append(f"{module.__name__}.{name} calls the kernel {func.id}")
    assert not wrong


_SCALARS = {"int", "bool", "float", "None"}
_NUMPY_SCALARS = {"uint64", "int64"}


def _scalars_only(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id in _SCALARS
    if isinstance(annotation, ast.Attribute):  # a numpy scalar: np.uint64
        return getattr(annotation.value, "id", "") == "np" and annotation.attr in _NUMPY_SCALARS
    if isinstance(annotation, ast.Constant):
        return annotation.value is None
    if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") == "tuple":
        parts = annotation.slice
        items = parts.elts if isinstance(parts, ast.Tuple) else [parts]
        return all(_scalars_only(item) for item in items)
    return False


def test_no_leaf_returns_an_array():
    """By its annotation: ints, bools, floats, None, numpy integers, and tuples of them
    (mypy holds the functions to their annotations)."""
    checked = 0
    for module, name, dispatcher in _dispatchers():
        if not _is_leaf(dispatcher):
            continue
        tree = ast.parse(inspect.getsource(dispatcher.py_func))
        returns = tree.body[0].returns
        assert returns is not None and _scalars_only(returns), f"{module.__name__}.{name}"
        checked += 1
    assert checked > 40
