//! The instruction budget: Luau's interrupt (called at loop back-edges and calls) counts down a
//! per-thread allowance. A Lua state is used by one thread at a time and an evaluation runs to
//! completion on the thread that started it, so the allowance of the running evaluation lives in
//! a thread-local; this is much cheaper per safepoint than mlua's boxed interrupt callback.
//! Does not limit memory (see `LuaRuntime::run`).

use std::cell::Cell;
use std::ffi::c_int;

use mlua::ffi;

/// No evaluation is running on this thread: safepoints are not counted.
const UNLIMITED: u64 = u64::MAX;

thread_local! {
    /// Safepoints the running evaluation may still pass.
    static REMAINING: Cell<u64> = const { Cell::new(UNLIMITED) };
    /// Whether the running evaluation ran out (then every later safepoint fails too).
    static EXHAUSTED: Cell<bool> = const { Cell::new(false) };
}

/// Installs the interrupt on the state behind `state` (any thread of it).
///
/// # Safety
/// `state` must be a live Luau state.
pub(crate) unsafe fn install(state: *mut ffi::lua_State) {
    unsafe {
        (*ffi::lua_callbacks(state)).interrupt = Some(interrupt);
    }
}

/// Starts counting for one evaluation on this thread.
pub(crate) fn start(safepoints: u64) {
    REMAINING.with(|r| r.set(safepoints.min(UNLIMITED - 1)));
    EXHAUSTED.with(|e| e.set(false));
}

/// Stops counting; returns whether the evaluation ran out of budget.
pub(crate) fn finish() -> bool {
    REMAINING.with(|r| r.set(UNLIMITED));
    EXHAUSTED.with(Cell::get)
}

/// # Safety
/// Called by Luau only, at a safepoint of a running script (never for GC steps here: `gc >= 0`
/// returns at once), where raising a Lua error is allowed.
unsafe extern "C-unwind" fn interrupt(state: *mut ffi::lua_State, gc: c_int) {
    if gc >= 0 {
        return;
    }
    let remaining = REMAINING.with(Cell::get);
    if remaining == UNLIMITED {
        return;
    }
    if remaining > 0 {
        REMAINING.with(|r| r.set(remaining - 1));
        return;
    }
    EXHAUSTED.with(|e| e.set(true));
    // SAFETY: raising an error at a safepoint is how Luau interrupts are meant to stop a
    // script; this frame owns nothing that needs dropping.
    unsafe {
        ffi::lua_pushlstring_(state, c"instruction budget exceeded".as_ptr(), 27);
        ffi::lua_error(state);
    }
}
