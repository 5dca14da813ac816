# strata_add_bundle(<target> SOURCES <file>... [LIBS <lib>...] [OUTPUT_DIR <dir>] [OUTPUT_NAME <name>]
#                   [NO_METADATA_CHECK])
#
# A Strata bundle: a Qt plugin module (a QObject implementing strata::Bundle with
# Q_PLUGIN_METADATA(IID STRATA_BUNDLE_IID FILE "bundle.json")), linked against the
# SDK and Qt 6 Core, with moc run on its sources. The library lands in OUTPUT_DIR
# (default: the current binary directory) as lib<OUTPUT_NAME>.so, ready to be
# dropped into a host's plugin directory. OUTPUT_NAME defaults to
# <name>_<version> from bundle.json, with every character of the version that is
# not a letter or digit as '_' (hello 1.2.0: libhello_1_2_0.so), so two versions
# of one bundle built side by side never overwrite each other. Qt is looked up
# here, not by the SDK: the SDK itself has no Qt in it.
#
# The bundle.json a source names in Q_PLUGIN_METADATA is checked when CMake
# configures and whenever it changes (strataCheckBundleJson.cmake): invalid JSON,
# a missing or malformed name, version, abi, description, defines or implements,
# or an abi other than the SDK's the bundle is compiled against (the global
# property STRATA_SDK_ABI, set by strataConfig.cmake), fails the build with the file
# and the reason.
# A change to it alone rebuilds the library in one build (the source that embeds
# it depends on it). NO_METADATA_CHECK skips the check, for a bundle whose
# metadata is wrong on purpose (Strata's tests of the host's own checks).
include("${CMAKE_CURRENT_LIST_DIR}/strataBundleJson.cmake")

function(strata_add_bundle target)
  set(_STRATA_BUNDLE_CMAKE_DIR "${CMAKE_CURRENT_FUNCTION_LIST_DIR}")  # where the checker script lies
  cmake_parse_arguments(B "NO_METADATA_CHECK" "OUTPUT_DIR;OUTPUT_NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT B_SOURCES)
    message(FATAL_ERROR "strata_add_bundle(${target}): no SOURCES")
  endif()
  if(NOT TARGET Qt6::Core)
    find_package(Qt6 REQUIRED COMPONENTS Core)
  endif()
  if(NOT B_OUTPUT_DIR)
    set(B_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  get_property(abi GLOBAL PROPERTY STRATA_SDK_ABI)
  if(NOT B_NO_METADATA_CHECK AND NOT abi MATCHES "^[0-9]+;[0-9]+$")
    message(FATAL_ERROR "strata_add_bundle(${target}): the SDK ABI is unknown (the global property STRATA_SDK_ABI "
                        "is '${abi}'); find_package(strata) sets it")
  endif()
  set(abi_major "")
  set(abi_minor "")
  if(abi MATCHES "^[0-9]+;[0-9]+$")
    list(GET abi 0 abi_major)
    list(GET abi 1 abi_minor)
  endif()
  # The bundle.json each source embeds: checked now, and at build time when it changes.
  set(bundle_name "")
  set(stamps "")
  foreach(src IN LISTS B_SOURCES)
    if(src MATCHES "^\\$<")
      continue()  # a generator expression (objects of another target)
    endif()
    get_filename_component(abs "${src}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${abs}" OR IS_DIRECTORY "${abs}")
      continue()
    endif()
    file(STRINGS "${abs}" lines REGEX "Q_PLUGIN_METADATA")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "FILE[ \t]*\"([^\"]+)\"")
        continue()
      endif()
      get_filename_component(src_dir "${abs}" DIRECTORY)
      get_filename_component(json "${CMAKE_MATCH_1}" ABSOLUTE BASE_DIR "${src_dir}")  # as moc resolves it
      set_property(SOURCE "${abs}" APPEND PROPERTY OBJECT_DEPENDS "${json}")
      # A change to it reconfigures too: the default output name carries its version.
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${json}")
      if(B_NO_METADATA_CHECK)
        continue()
      endif()
      strata_check_bundle_json("${json}" error name version "${abi_major}" "${abi_minor}")
      if(error)
        message(FATAL_ERROR "strata_add_bundle(${target}): ${error}")
      endif()
      get_filename_component(json_name "${json}" NAME)
      set(stamp "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${target}.dir/${json_name}.checked")
      add_custom_command(OUTPUT "${stamp}"
        COMMAND "${CMAKE_COMMAND}" "-DJSON=${json}" "-DSTAMP=${stamp}" "-DABI_MAJOR=${abi_major}"
                "-DABI_MINOR=${abi_minor}" -P "${_STRATA_BUNDLE_CMAKE_DIR}/strataCheckBundleJson.cmake"
        DEPENDS "${json}" "${_STRATA_BUNDLE_CMAKE_DIR}/strataCheckBundleJson.cmake"
        COMMENT "Checking ${json_name} of bundle ${target}"
        VERBATIM)
      list(APPEND stamps "${stamp}")
      if(NOT bundle_name)
        string(REGEX REPLACE "[^A-Za-z0-9]" "_" version_part "${version}")
        set(bundle_name "${name}_${version_part}")
      endif()
    endforeach()
  endforeach()
  if(NOT B_OUTPUT_NAME)
    set(B_OUTPUT_NAME ${bundle_name})
  endif()
  if(NOT B_OUTPUT_NAME)
    set(B_OUTPUT_NAME ${target})
  endif()
  add_library(${target} MODULE ${B_SOURCES} ${stamps})
  set_target_properties(${target} PROPERTIES
    AUTOMOC ON
    PREFIX "lib"
    OUTPUT_NAME ${B_OUTPUT_NAME}
    LIBRARY_OUTPUT_DIRECTORY ${B_OUTPUT_DIR}
    # Note [CUDA's dialect]: the C++20 the SDK requires is not asked of nvcc.
    CUDA_STANDARD 17)
  target_link_libraries(${target} PRIVATE strata::sdk Qt6::Core ${B_LIBS})
endfunction()
