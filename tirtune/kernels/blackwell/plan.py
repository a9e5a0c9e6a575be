"""The Blackwell kernel's plan: everything that follows from (config, problem), derived in Python.

`plan(config, problem)` checks the pair against the Blackwell space's rules (SpaceError naming the
broken ones) and returns a `BlackwellPlan`: the skeleton's common part (`GemmPlan`: sizes, tiles,
k-tiles, warpgroups, tile schedule) plus the CTA pair (`cta_group`: cluster 2 is a tcgen05 CTA
pair along M, one MMA of M = 256). Consumer c computes 128 rows of the tile (CONSUMER_ROWS) into
TMEM columns [c*blk_n, (c+1)*blk_n); in a pair each CTA loads its own A rows and half of the B
rows (`b_rows`), and every TMA byte of the pair lands on CTA 0's `full` barrier (`tx_bytes`).
Nothing in it needs TVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from tirtune.core.config import Config
from tirtune.core.problem import Problem
from tirtune.kernels.skeleton import GemmPlan, TileSchedule, plan_fields
from tirtune.space.blackwell.rules import BLACKWELL_CONFIG_RULES, BLACKWELL_PROBLEM_RULES, CONSUMER_ROWS
from tirtune.space.validity import refuse_if_broken

__all__ = ["ARCH", "SMS", "TEMPLATE_NAME", "BlackwellPlan", "plan", "tx_bytes"]

TEMPLATE_NAME = "blackwell_gemm"
ARCH = "sm_100a"  # the target compile_one builds this template for
SMS = 148  # streaming multiprocessors of the B200: the persistent grid's cap


@dataclass(frozen=True, slots=True)
class BlackwellPlan(GemmPlan):
    """Everything the kernel needs that follows from (config, problem), computed once in Python:
    the shared part (`GemmPlan`) plus the CTA pair."""

    cta_group: int = 1

    @property
    def b_rows(self) -> int:
        """Rows of B this CTA loads per stage (half of blk_n in a CTA pair)."""
        return self.blk_n // self.cta_group

    @property
    def mma_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of one tcgen05.mma instruction: M spans the CTA pair."""
        return (CONSUMER_ROWS * self.cta_group, self.blk_n, 16)

    @property
    def cluster_tile(self) -> tuple[int, int]:
        return (self.blk_m * self.cta_group, self.blk_n)

    @property
    def tile_schedule(self) -> TileSchedule:
        """Cluster tiles (a CTA pair's 2*blk_m x blk_n, or one CTA's tile): one cluster each, or at
        most one CTA per SM (whole pairs) when persistent."""
        tm, tn = self.cluster_tile
        grid = (-(-self.m // tm), -(-self.n // tn))
        return TileSchedule.of(grid, self.cta_group, self.persistent, SMS, self.raster_group)

    @property
    def tiles(self) -> int:
        """Cluster tiles of the output."""
        return self.tile_schedule.tiles

    @property
    def tiles_per_cluster(self) -> int:
        return self.tile_schedule.iterations

    @property
    def tmem_columns(self) -> int:
        """Columns the accumulators use (the allocation is always all 512)."""
        return self.consumers * self.blk_n

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA delivers into one CTA per stage: whole boxes, out-of-bounds zeros included."""
        return (self.consumers * CONSUMER_ROWS + self.b_rows) * self.blk_k * 2


def plan(config: Config, problem: Problem) -> BlackwellPlan:
    """Check (config, problem) against the Blackwell rules and derive the kernel constants."""
    refuse_if_broken(TEMPLATE_NAME, config, problem, BLACKWELL_PROBLEM_RULES, BLACKWELL_CONFIG_RULES)
    return BlackwellPlan(**plan_fields(config, problem), cta_group=config.cluster)


def tx_bytes(p: BlackwellPlan) -> int:
    """Bytes the `full` barrier (CTA 0's, in a pair) waits for per stage."""
    return p.stage_bytes * p.cta_group
