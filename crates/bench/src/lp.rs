//! The fluid covering LP: min Σ price_t·x_t subject to Σ_t cap_t·x_t ≥ demand, x ≥ 0.
//!
//! Its dual solution prices each resource (cpu, memory, pod slots, GPUs) at what it really costs
//! on the cheapest mix of instance types, which is what the packer uses to compare node shapes.
//! Its optimum is also a lower bound on the cost of any integer plan (and on the configuration
//! LP), which is how the benchmarks measure the packer's gap. The LP has one row per resource, so
//! a revised simplex with a dense k×k basis inverse is both small and exact enough.

// Dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop)]

/// Solution of the covering LP.
#[derive(Clone, Debug, PartialEq)]
pub struct LpSolution {
    /// Minimum fractional cost.
    pub cost: f64,
    /// Dual price of each resource row (cost per unit), non-negative.
    pub duals: Vec<f64>,
    /// Fractional count per column.
    pub x: Vec<f64>,
    /// False when some demand row could not be covered by any column.
    pub feasible: bool,
}

const EPS: f64 = 1e-9;

/// Solves `min Σ cost_j x_j` s.t. `Σ_j cols_j[r] x_j ≥ demand[r]`, `x ≥ 0`.
///
/// `cols` are the capacities of each column (one entry per row); `demand` the right-hand side.
pub fn solve_covering(cols: &[Vec<f64>], costs: &[f64], demand: &[f64]) -> LpSolution {
    let k = demand.len();
    let n = cols.len();
    let max_cost = costs.iter().cloned().fold(1.0_f64, f64::max);
    let big_m = max_cost * 1e7;
    // Columns: 0..n structural, n..n+k surplus (-e_r), n+k..n+2k artificial (+e_r).
    let column = |j: usize, r: usize| -> f64 {
        if j < n {
            cols[j].get(r).copied().unwrap_or(0.0)
        } else if j < n + k {
            if j - n == r {
                -1.0
            } else {
                0.0
            }
        } else if j - n - k == r {
            1.0
        } else {
            0.0
        }
    };
    let cost_of = |j: usize| -> f64 {
        if j < n {
            costs[j]
        } else if j < n + k {
            0.0
        } else {
            big_m
        }
    };
    let mut basis: Vec<usize> = (0..k).map(|r| n + k + r).collect();
    let mut binv: Vec<Vec<f64>> = (0..k)
        .map(|r| (0..k).map(|c| if r == c { 1.0 } else { 0.0 }).collect())
        .collect();
    let mut xb: Vec<f64> = demand.iter().map(|d| d.max(0.0)).collect();
    let mut in_basis = vec![false; n + 2 * k];
    for &b in &basis {
        in_basis[b] = true;
    }
    let mut pi = vec![0.0; k];
    let max_iter = 50 * (k + 1) + 4 * n;
    for iter in 0..max_iter {
        // Duals: pi = c_B^T B^-1.
        for (c, p) in pi.iter_mut().enumerate() {
            *p = (0..k).map(|r| cost_of(basis[r]) * binv[r][c]).sum();
        }
        // Pricing: Dantzig's rule, Bland's rule late to avoid cycling.
        let bland = iter > max_iter / 2;
        let mut enter = None;
        let mut best = -EPS * max_cost.max(1.0);
        for j in 0..n + 2 * k {
            if in_basis[j] {
                continue;
            }
            let rc = cost_of(j) - (0..k).map(|r| pi[r] * column(j, r)).sum::<f64>();
            if rc < best {
                enter = Some(j);
                if bland {
                    break;
                }
                best = rc;
            }
        }
        let Some(j) = enter else { break };
        let u: Vec<f64> = (0..k)
            .map(|r| (0..k).map(|c| binv[r][c] * column(j, c)).sum())
            .collect();
        let mut leave = None;
        let mut best_ratio = f64::INFINITY;
        for r in 0..k {
            if u[r] > EPS {
                let ratio = xb[r] / u[r];
                if ratio < best_ratio - EPS
                    || (bland
                        && (ratio - best_ratio).abs() <= EPS
                        && leave.is_some_and(|l: usize| basis[r] < basis[l]))
                {
                    best_ratio = ratio;
                    leave = Some(r);
                }
            }
        }
        let Some(r) = leave else {
            // Unbounded cannot happen with non-negative costs; stop defensively.
            break;
        };
        let pivot = u[r];
        for c in 0..k {
            binv[r][c] /= pivot;
        }
        xb[r] /= pivot;
        for i in 0..k {
            if i != r && u[i].abs() > 0.0 {
                let f = u[i];
                for c in 0..k {
                    binv[i][c] -= f * binv[r][c];
                }
                xb[i] -= f * xb[r];
            }
        }
        in_basis[basis[r]] = false;
        basis[r] = j;
        in_basis[j] = true;
    }
    let mut x = vec![0.0; n];
    let mut feasible = true;
    for r in 0..k {
        let b = basis[r];
        if b < n {
            x[b] = xb[r].max(0.0);
        } else if b >= n + k && xb[r] > 1e-7 {
            feasible = false;
        }
    }
    let cost = x.iter().zip(costs).map(|(x, c)| x * c).sum();
    for p in pi.iter_mut() {
        if !p.is_finite() || *p < 0.0 || *p > max_cost * 1e6 {
            *p = 0.0;
        }
    }
    LpSolution {
        cost,
        duals: pi,
        x,
        feasible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_cheapest_mix() {
        // Two resources; a cpu-heavy and a memory-heavy type; demand needs both.
        let cols = vec![vec![4.0, 8.0], vec![2.0, 16.0], vec![4.0, 16.0]];
        let costs = vec![0.17, 0.126, 0.3];
        let demand = vec![40.0, 160.0];
        let s = solve_covering(&cols, &costs, &demand);
        assert!(s.feasible);
        // Check feasibility of x and that the dual bound equals the primal (strong duality).
        for r in 0..2 {
            let cov: f64 = cols.iter().zip(&s.x).map(|(c, x)| c[r] * x).sum();
            assert!(cov >= demand[r] - 1e-6, "row {r} covered {cov}");
        }
        let dual: f64 = s.duals.iter().zip(&demand).map(|(p, d)| p * d).sum();
        assert!(
            (dual - s.cost).abs() < 1e-6,
            "dual {dual} primal {}",
            s.cost
        );
        // Dual feasibility: no column is priced above its cost.
        for (c, cost) in cols.iter().zip(&costs) {
            let v: f64 = c.iter().zip(&s.duals).map(|(a, p)| a * p).sum();
            assert!(v <= cost + 1e-9);
        }
        // Brute force over a grid of the two cheap columns confirms the optimum.
        let mut best = f64::INFINITY;
        for a in 0..=200 {
            for b in 0..=200 {
                let (xa, xb) = (a as f64 * 0.1, b as f64 * 0.1);
                if 4.0 * xa + 2.0 * xb >= 40.0 - 1e-9 && 8.0 * xa + 16.0 * xb >= 160.0 - 1e-9 {
                    best = best.min(0.17 * xa + 0.126 * xb);
                }
            }
        }
        assert!(s.cost <= best + 1e-9);
    }

    #[test]
    fn infeasible_row_is_reported() {
        let s = solve_covering(&[vec![1.0, 0.0]], &[1.0], &[5.0, 1.0]);
        assert!(!s.feasible);
        let z = solve_covering(&[vec![1.0]], &[1.0], &[0.0]);
        assert!(z.feasible);
        assert!(z.cost.abs() < 1e-12);
    }
}
