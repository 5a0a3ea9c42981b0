// The schedule generator (pd2bw_pipeline) under the planner's names, pd2bw::planner::{OpKind, Op,
// ScheduleSpec, stage_ops, version_for_step}, which the planner, the simulator and their tests use.
// Code outside the planner (the executor) includes "pd2bw/pipeline/schedule.hpp".
#pragma once

#include "pd2bw/pipeline/schedule.hpp"

namespace pd2bw::planner {

using schemas::Schedule;
using pipeline::Op;
using pipeline::OpKind;
using pipeline::ScheduleSpec;
using pipeline::stage_ops;
using pipeline::to_string;
using pipeline::version_for_step;

}  // namespace pd2bw::planner
