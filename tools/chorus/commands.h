// The chorus CLI's subcommands. Each Add*Command registers its subcommand on `app`; when the
// subcommand runs it stores the process exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace chorus::cli {

void AddDemoCommand(CLI::App& app, int& exit_code);
void AddBenchCommand(CLI::App& app, int& exit_code);
void AddLaunchCommand(CLI::App& app, int& exit_code);
void AddTuneCommand(CLI::App& app, int& exit_code);
void AddModelCommand(CLI::App& app, int& exit_code);

}  // namespace chorus::cli
