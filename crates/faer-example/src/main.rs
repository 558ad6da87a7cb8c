//! faer kernels on tempalloc scratch: `cargo run --release -p faer-example`.
//!
//! One inference runs a "layer" kernel per layer; each solves a symmetric
//! positive definite system `A x = B` with a Cholesky factorization. The
//! kernel copies `A` and `B` into scratch, asks faer how much scratch the
//! factorization and the solve need (`*_scratch()`, a `dyn_stack::StackReq`),
//! takes that `MemStack` from its context (`KernelContext::mem_stack`,
//! feature `dyn-stack`) and factors and solves in place. The example checks
//! every solution against faer's own allocating path (`Mat::llt` and
//! `Solve::solve`) and that inferences after the first make no system
//! allocation (a counting `#[global_allocator]`); it exits non-zero if not.

#[path = "../../../examples/common/counting.rs"]
mod counting;
// tempalloc's seeded generator, private to the library: included as source.
#[allow(dead_code)]
#[path = "../../../src/trace/numbers.rs"]
mod numbers;

use std::process::ExitCode;

use faer::linalg::cholesky::llt::factor::{self, LltError, LltRegularization};
use faer::linalg::cholesky::llt::solve;
use faer::linalg::solvers::Solve;
use faer::{Mat, MatMut, Par, Side, Spec};
use tempalloc::{CachingAllocator, Error, KernelContext, TempAllocator, with_context};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const LAYERS: usize = 8;
const INFERENCES: usize = 4;
/// Right-hand sides per system.
const RHS: usize = 4;

/// One layer's problem: `A` (symmetric positive definite) and `B`.
struct Problem {
    a: Mat<f64>,
    b: Mat<f64>,
}

/// `A = M^T M + n I` and `B` from a fixed seed; sizes vary by layer.
fn problem(layer: usize) -> Problem {
    let n = 64 + 48 * layer;
    let mut rng = numbers::SplitMix64::new(0xFAE5 + layer as u64);
    let m = Mat::<f64>::from_fn(n, n, |_, _| rng.unit() - 0.5);
    let mut a = m.transpose() * &m;
    for i in 0..n {
        a[(i, i)] += n as f64;
    }
    let b = Mat::<f64>::from_fn(n, RHS, |_, _| rng.unit() - 0.5);
    Problem { a, b }
}

/// Why a kernel failed.
#[derive(Debug)]
enum KernelError {
    Scratch(Error),
    /// Cannot happen for `M^T M + n I`, but a kernel reports it.
    NotPositiveDefinite(LltError),
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelError::Scratch(error) => write!(f, "scratch: {error}"),
            KernelError::NotPositiveDefinite(error) => {
                write!(f, "not positive definite: {error:?}")
            }
        }
    }
}

impl From<Error> for KernelError {
    fn from(error: Error) -> Self {
        KernelError::Scratch(error)
    }
}

/// The kernel: solves `problem` into `x` with every buffer from `ctx`.
fn cholesky_solve(
    ctx: &KernelContext,
    problem: &Problem,
    x: &mut Mat<f64>,
) -> Result<(), KernelError> {
    let (n, k) = (problem.a.nrows(), problem.b.ncols());
    let l = ctx.scratch::<f64>(n * n)?;
    let mut l = MatMut::from_column_major_slice_mut(l, n, n);
    l.copy_from(&problem.a);
    let rhs = ctx.scratch::<f64>(n * k)?;
    let mut rhs = MatMut::from_column_major_slice_mut(rhs, n, k);
    rhs.copy_from(&problem.b);

    let req = factor::cholesky_in_place_scratch::<f64>(n, Par::Seq, Spec::default())
        .or(solve::solve_in_place_scratch::<f64>(n, k, Par::Seq));
    let stack = ctx.mem_stack(req)?;
    factor::cholesky_in_place(
        l.as_mut(),
        LltRegularization::default(),
        Par::Seq,
        stack,
        Spec::default(),
    )
    .map_err(KernelError::NotPositiveDefinite)?;
    solve::solve_in_place(l.as_ref(), rhs.as_mut(), Par::Seq, stack);
    x.copy_from(&rhs);
    Ok(())
}

fn max_abs_diff(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    let mut max = 0.0f64;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            max = max.max((a[(i, j)] - b[(i, j)]).abs());
        }
    }
    max
}

fn run() -> Result<(), String> {
    let problems: Vec<Problem> = (0..LAYERS).map(problem).collect();
    // faer's own path: it allocates the factor and the result itself.
    let expected: Vec<Mat<f64>> = problems
        .iter()
        .map(|p| {
            p.a.llt(Side::Lower)
                .map(|llt| llt.solve(&p.b))
                .map_err(|e| format!("faer's own Cholesky failed: {e:?}"))
        })
        .collect::<Result<_, _>>()?;
    let mut solutions: Vec<Mat<f64>> = problems
        .iter()
        .map(|p| Mat::zeros(p.a.nrows(), RHS))
        .collect();

    let mut temp = CachingAllocator::new();
    for inference in 0..INFERENCES {
        let before = counting::allocations();
        for (layer, (problem, x)) in problems.iter().zip(&mut solutions).enumerate() {
            // The kernel's own error inside, the scratch error (recorded
            // or returned) outside.
            with_context(&mut temp, |ctx| Ok(cholesky_solve(ctx, problem, x)))
                .map_err(KernelError::Scratch)
                .and_then(|solved| solved)
                .map_err(|e| format!("inference {inference}, layer {layer}: {e}"))?;
        }
        let system = counting::allocations() - before;
        for (layer, (x, want)) in solutions.iter().zip(&expected).enumerate() {
            let diff = max_abs_diff(x, want);
            if diff > 1e-10 {
                return Err(format!(
                    "layer {layer}: differs from faer's own solve by {diff:e}"
                ));
            }
        }
        println!(
            "inference {inference}: {LAYERS} Cholesky solves (n = 64..{}), {system} system allocations, \
             {} B of scratch held; matches faer's own path",
            64 + 48 * (LAYERS - 1),
            temp.stats().bytes_held
        );
        if inference > 0 && system != 0 {
            return Err(format!(
                "inference {inference} made {system} system allocations (0 expected once warm)"
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("faer-example: {message}");
            ExitCode::FAILURE
        }
    }
}
