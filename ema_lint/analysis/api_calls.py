"""Which calls of the module are calls of a known averaging API, with arguments bound."""

from __future__ import annotations

import libcst as cst

from .apis import API_TABLE, ApiTable, BoundCall, Role, bind_arguments
from .context import FileContext
from .names import ImportTable


class ApiCalls:
    """Every call of the module that resolves to an entry of the API table."""

    def __init__(self, table: ApiTable) -> None:
        self.table = table
        self._by_call: dict[int, BoundCall] = {}
        self.calls: list[BoundCall] = []

    @classmethod
    def build(cls, ctx: FileContext) -> ApiCalls:
        result = cls(API_TABLE)
        imports = ctx.get(ImportTable)
        known = API_TABLE.by_name
        for call in ctx.nodes(cst.Call):
            qualname = imports.resolve(call.func, known)
            if qualname is None:
                continue
            bound = bind_arguments(known[qualname], call, qualname)
            result._by_call[id(call)] = bound
            result.calls.append(bound)
        return result

    def bound(self, call: cst.CSTNode) -> BoundCall | None:
        return self._by_call.get(id(call))

    def with_role(self, *roles: Role) -> list[BoundCall]:
        return [b for b in self.calls if b.spec.role in roles]
