// The schedule generator under its former names, pd2bw::planner::{OpKind, Op, ScheduleSpec, stage_ops,
// version_for_step}, for code written before it moved to the pipeline library. It ships with
// pd2bw_pipeline so that targets linking only that library (the executor) still find it. New code
// includes "pd2bw/pipeline/schedule.hpp".
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
