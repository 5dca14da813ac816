# cmake -DJSON=<bundle.json> [-DSTAMP=<file>] [-DABI_MAJOR=N -DABI_MINOR=N] -P strataCheckBundleJson.cmake
#
# Fails with the file and the reason when bundle.json is not valid JSON or lacks
# what a host requires of it: "name" (letters, digits, '_', '.', '-'), "version"
# (MAJOR.MINOR.PATCH[-pre][+build]), "abi" {"major", "minor"} (integers; given
# ABI_MAJOR/ABI_MINOR, exactly those), "description" (a string), and "defines" and
# "implements" (arrays of namespaces).
# moc only warns about a bad file and embeds nothing, and the host would later say
# "metadata not found": the build says it instead. strata_add_bundle runs it when
# it configures and again whenever the file changes.
include("${CMAKE_CURRENT_LIST_DIR}/strataBundleJson.cmake")
strata_check_bundle_json("${JSON}" error name version "${ABI_MAJOR}" "${ABI_MINOR}")
if(error)
  message(FATAL_ERROR "${error}")
endif()
if(STAMP)
  file(WRITE "${STAMP}" "${name} ${version}\n")
endif()
