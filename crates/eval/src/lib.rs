//! EventSource evaluation: GVK/namespace/name/label filters, Lua and CEL, sandboxed and budgeted.
