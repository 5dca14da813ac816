# strata_add_bundle(<target> SOURCES <file>... [LIBS <lib>...] [OUTPUT_DIR <dir>] [OUTPUT_NAME <name>])
#
# A Strata bundle: a Qt plugin module (a QObject implementing strata::Bundle with
# Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")), linked against the
# SDK and Qt 6 Core, with moc run on its sources. The library lands in OUTPUT_DIR
# (default: the current binary directory) as lib<OUTPUT_NAME>.so, ready to be
# dropped into a host's plugin directory. Qt is looked up here, not by the SDK:
# the SDK itself has no Qt in it.
function(strata_add_bundle target)
  cmake_parse_arguments(B "" "OUTPUT_DIR;OUTPUT_NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT B_SOURCES)
    message(FATAL_ERROR "strata_add_bundle(${target}): no SOURCES")
  endif()
  if(NOT TARGET Qt6::Core)
    find_package(Qt6 REQUIRED COMPONENTS Core)
  endif()
  if(NOT B_OUTPUT_DIR)
    set(B_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  if(NOT B_OUTPUT_NAME)
    set(B_OUTPUT_NAME ${target})
  endif()
  add_library(${target} MODULE ${B_SOURCES})
  set_target_properties(${target} PROPERTIES
    AUTOMOC ON
    PREFIX "lib"
    OUTPUT_NAME ${B_OUTPUT_NAME}
    LIBRARY_OUTPUT_DIRECTORY ${B_OUTPUT_DIR}
    # Note [CUDA's dialect]: the C++20 the SDK requires is not asked of nvcc.
    CUDA_STANDARD 17)
  target_link_libraries(${target} PRIVATE strata::sdk Qt6::Core ${B_LIBS})
endfunction()
