//! ferrohsm-softhsm2-util: accepts softhsm2-util's options and prints the lines scripts parse,
//! acting on ferrohsm tokens, so existing setup scripts keep working after the switch.
#![deny(unsafe_code)]

use clap::{CommandFactory, Parser};
use cryptoki::session::UserType;
use ferrohsm::cli::module::{self, explain, Result};
use ferrohsm::cli::{docs, pin, tokens};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrohsm-softhsm2-util",
    version,
    disable_version_flag = true,
    about = "softhsm2-util for ferrohsm tokens: the same options and output lines"
)]
struct Args {
    /// Show the version.
    #[arg(short = 'v', long = "version")]
    version: bool,
    /// Display all the available slots.
    #[arg(long = "show-slots")]
    show_slots: bool,
    /// Initialize the token at a given slot, token label or serial (or the free one with --free).
    #[arg(long = "init-token")]
    init_token: bool,
    /// Import a key pair (PKCS#8 file) into the token.
    #[arg(long = "import")]
    import: Option<PathBuf>,
    /// Delete the token at a given token label or serial.
    #[arg(long = "delete-token")]
    delete_token: bool,
    /// Use the first free/uninitialized token.
    #[arg(long)]
    free: bool,
    /// The slot where the token is located.
    #[arg(long)]
    slot: Option<u64>,
    /// Will use the token with this label.
    #[arg(long)]
    token: Option<String>,
    /// Will use the token with this serial.
    #[arg(long)]
    serial: Option<String>,
    /// Defines the label of the object or the token.
    #[arg(long)]
    label: Option<String>,
    /// The SO PIN for the token (4-255 characters).
    #[arg(long = "so-pin")]
    so_pin: Option<String>,
    /// The PIN for the normal user.
    #[arg(long)]
    pin: Option<String>,
    /// Defines the ID of the object (hexadecimal characters).
    #[arg(long)]
    id: Option<String>,
    /// Used to override a warning (an existing ID).
    #[arg(long)]
    force: bool,
    /// Do not import the public key.
    #[arg(long = "no-public-key")]
    no_public_key: bool,
    /// Use another PKCS#11 library than ferrohsm.
    #[arg(long)]
    module: Option<PathBuf>,
    /// Write this program's man page and shell completions into DIR (packaging/build-deb).
    #[arg(long = "generate-docs", hide = true, value_name = "DIR")]
    generate_docs: Option<PathBuf>,
}

fn show_slots(a: &Args) -> Result<()> {
    let p = module::load(a.module.as_deref())?;
    println!("Available slots:");
    for s in p.get_all_slots().map_err(|e| explain("cannot list slots", e))? {
        let si = p.get_slot_info(s).map_err(|e| explain("slot info", e))?;
        let t = p.get_token_info(s).map_err(|e| explain("token info", e))?;
        println!("Slot {}", s.id());
        println!("    Slot info:");
        println!("        Description:      {}", si.slot_description());
        println!("        Manufacturer ID:  {}", si.manufacturer_id());
        println!("        Token present:    yes");
        println!("    Token info:");
        println!("        Manufacturer ID:  {}", t.manufacturer_id());
        println!("        Model:            {}", t.model());
        println!("        Serial number:    {}", t.serial_number());
        println!(
            "        Initialized:      {}",
            if t.token_initialized() { "yes" } else { "no" }
        );
        println!(
            "        User PIN init.:   {}",
            if t.user_pin_initialized() { "yes" } else { "no" }
        );
        println!("        Label:            {}", t.label());
    }
    Ok(())
}

fn init_token(a: &Args) -> Result<()> {
    let label = a
        .label
        .as_deref()
        .ok_or("A label for the token must be supplied. Use --label <text>")?;
    if label.len() > 32 {
        return Err("The token label must not have a length greater than 32 chars.".into());
    }
    let p = module::load(a.module.as_deref())?;
    let (slot, fresh) = if a.free {
        let s = module::free_slot(&p)?;
        println!("Slot {} has a free/uninitialized token.", s.id());
        (s, true)
    } else {
        let s = module::find_token(&p, a.slot, a.token.as_deref(), a.serial.as_deref())?;
        let initialized = p
            .get_token_info(s)
            .map_err(|e| explain("token info", e))?
            .token_initialized();
        (s, !initialized)
    };
    let so = pin::get(
        a.so_pin.clone(),
        "FERROHSM_SO_PIN",
        "=== SO PIN (4-255 characters) ===\nPlease enter SO PIN",
    )?;
    let user = pin::get(
        a.pin.clone(),
        "FERROHSM_PIN",
        "=== User PIN (4-255 characters) ===\nPlease enter user PIN",
    )?;
    p.init_token(slot, &so, label)
        .map_err(|e| explain("The token could not be initialized", e))?;
    let s = p.open_rw_session(slot).map_err(|e| explain("open session", e))?;
    s.login(UserType::So, Some(&so))
        .map_err(|e| explain("SO login", e))?;
    s.init_pin(&user)
        .map_err(|e| explain("Could not initialize the user PIN", e))?;
    if fresh {
        // ferrohsm slot ids never change: the "reassigned" slot is the same one.
        println!(
            "The token has been initialized and is reassigned to slot {}",
            slot.id()
        );
    } else {
        println!("The token has been initialized on slot {}", slot.id());
    }
    Ok(())
}

fn import(a: &Args, file: &std::path::Path) -> Result<()> {
    let label = a
        .label
        .clone()
        .ok_or("A label for the object must be supplied. Use --label <text>")?;
    let id =
        a.id.as_deref()
            .ok_or("An ID for the object must be supplied. Use --id <hex>")?;
    let key = tokens::read_key(file)?;
    let p = module::load(a.module.as_deref())?;
    let slot = module::find_token(&p, a.slot, a.token.as_deref(), a.serial.as_deref())?;
    let user = pin::get(
        a.pin.clone(),
        "FERROHSM_PIN",
        "=== User PIN ===\nPlease enter user PIN",
    )?;
    tokens::import_key(&p, slot, &user, &key, id, label, a.force, a.no_public_key)?;
    println!("The key pair has been imported.");
    Ok(())
}

fn delete_token(a: &Args) -> Result<()> {
    if a.token.is_none() && a.serial.is_none() {
        return Err(
            "A token label or serial must be supplied. Use --token <label> or --serial <serial>".into(),
        );
    }
    // Like softhsm2-util: the store's file permissions guard deletion; an SO PIN, when given,
    // is checked.
    let so = a.so_pin.clone().map(|p| cryptoki::types::AuthPin::new(p.into()));
    let (_, slot, path) =
        tokens::delete_from_store(None, a.token.as_deref(), a.serial.as_deref(), so.as_ref())?;
    println!("The token ({path}, slot {slot}) has been deleted.");
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let result = if let Some(dir) = &a.generate_docs {
        docs::generate(Args::command(), dir)
    } else if a.version {
        println!("{}", env!("CARGO_PKG_VERSION"));
        Ok(())
    } else if a.show_slots {
        show_slots(&a)
    } else if a.init_token {
        init_token(&a)
    } else if let Some(f) = a.import.clone() {
        import(&a, &f)
    } else if a.delete_token {
        delete_token(&a)
    } else {
        Err("give an action: --show-slots, --init-token, --import or --delete-token (see --help)".into())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ERROR: {e}");
            ExitCode::FAILURE
        }
    }
}
